#!/usr/bin/env bash
# The stem-cell study at full size on EWT (He & Choi 2021, replicated on free data): every run of
# docs/ewt-results.md's full-size sections, in the order the claims need them. Re-runnable: a
# finished run is skipped, an interrupted one resumes from its last checkpoint, so after a stop
# (or a machine that goes away) run the same command again. Seed 1 of every setting comes first,
# then seed 2, then seed 3, so that a partial study covers every setting.
#
#   bash docs/ewt-study.sh [STAGE ...]     # stages, in order: baselines dp probes sp budget doc
#   STUDY=runs/ewt-study SEEDS="1 2 3" EPOCHS=2 bash docs/ewt-study.sh baselines
#
# STUDY: where the run folders go (default runs/ewt-study); SEEDS: seeds per setting (1 2 3);
# EPOCHS: epochs of the full-train runs (3; the dev curves are in each metrics.json "history");
# EXTRA: more key=value for every training run; SETTINGS: a subset of the settings below.
# Every run is `python -m mtl_heads.train` on `data=ewt` with the packaged encoder; NER trains on
# the dev split (EWT's train split has no NER layer), alone for 5 epochs or, in MTL-5, through
# data.task_splits; its dev score is then on its own training data (see the doc).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${STUDY:-runs/ewt-study}
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-3}
EXTRA=${EXTRA:-}   # more key=value for every training run (e.g. a smoke test: EXTRA="data.max_sentences=40")
export HF_HUB_OFFLINE=1 WANDB_MODE=${WANDB_MODE:-offline}

# setting name -> its training arguments (the unpruned baselines; pruned settings add to these)
declare -A SETTING=(
  [pos]="tasks=pos train.epochs=$EPOCHS"
  [dep]="tasks=dep train.epochs=$EPOCHS"
  [con]="tasks=con train.epochs=$EPOCHS"
  [srl]="tasks=srl train.epochs=$EPOCHS"
  [ner]="tasks=ner data.splits.train=dev train.epochs=5"
  [mtl5]="tasks=pos,ner,dep,con,srl train.epochs=$EPOCHS "'data.task_splits={"ner":{"train":"dev"}}'
)
read -r -a ORDER <<< "${SETTINGS:-pos dep con srl ner mtl5}"  # SETTINGS="pos mtl5": only these
DP="prune=dynamic train.lr_gate=0.05"   # gates learnt with the encoder and decoders, reference lambdas
BUDGET="prune.budget=36"                # equal sparsity: 36 of the 72 heads kept, every task

# one run into $1 (skipped when finished, resumed when started), with the other arguments; a run
# that fails is named at the end and the others go on (the script then exits 1)
FAILED=()
run() {
  local dir=$1; shift
  if [[ -f $dir/metrics.json ]]; then echo "done: $dir"; return; fi
  if [[ -f $dir/config.yaml ]]; then
    python -m mtl_heads.train resume=true run_dir="$dir" train.progress=false || FAILED+=("$dir")
  else
    # shellcheck disable=SC2068
    python -m mtl_heads.train data=ewt $@ $EXTRA run_dir="$dir" train.progress=false || FAILED+=("$dir")
  fi
}

baselines() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  run "$STUDY/$s/seed$n" ${SETTING[$s]} seed="$n" experiment="$s"; done; done; }

dp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  run "$STUDY/$s-dp/seed$n" ${SETTING[$s]} $DP seed="$n" experiment="$s-dp"; done; done; }

# static pruning: gates learnt on the trained baseline of the same seed, its decoders frozen
sp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  run "$STUDY/$s-sp/seed$n" ${SETTING[$s]} prune=static init="$STUDY/$s/seed$n" seed="$n" experiment="$s-sp"
  done; done; }

budget() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  run "$STUDY/$s-dp-budget/seed$n" ${SETTING[$s]} $DP $BUDGET seed="$n" experiment="$s-dp-budget"; done; done; }

# probes before (the pretrained encoder) and after fine-tuning (each STL run and MTL-5), EWT test
probes() {
  local out=$STUDY/probes
  mkdir -p "$out"
  [[ -f $out/pretrained/report.json ]] || python -m mtl_heads.probe data=ewt split=test probes=pos,ner,dep,con,srl progress=false \
    out="$out/pretrained"
  for n in $SEEDS; do for s in "${ORDER[@]}"; do
    [[ -f $out/$s-seed$n/report.json ]] || python -m mtl_heads.probe model="$STUDY/$s/seed$n" data=ewt split=test \
      probes=pos,ner,dep,con,srl progress=false out="$out/$s-seed$n"
  done; done
}

# the doc's tables and pictures, from the run folders only
doc() {
  python -m mtl_heads.compare "$STUDY" --out "$STUDY/compare" --plot --test all
  shopt -s nullglob  # a stage not run yet adds no folder
  local pruned=("$STUDY"/*-dp "$STUDY"/*-sp "$STUDY"/*-dp-budget) pages=("$STUDY")
  local pretrained=()  # are the heads that survive everywhere the pretrained encoder's best probe heads?
  [[ -f $STUDY/probes/pretrained/report.json ]] && pretrained=(--probes "$STUDY/probes/pretrained")
  [[ ${#pruned[@]} -gt 0 ]] && python -m mtl_heads.gates "${pruned[@]}" --out "$STUDY/gates" "${pretrained[@]}"
  local reports=("$STUDY"/probes/*/)
  if [[ ${#reports[@]} -ge 2 ]]; then
    python -m mtl_heads.probe compare="$(IFS=,; echo "${reports[*]%/}")" out="$STUDY/probes-compare" progress=false
    pages+=("$STUDY/probes-compare")
  fi
  python -m mtl_heads.report "${pages[@]}" --html "$STUDY/report.html" --title "EWT stem-cell study" --test all
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(baselines dp probes sp budget doc)
for stage in "${stages[@]}"; do
  case $stage in
    baselines|dp|sp|budget|probes|doc) echo "=== $stage ($(date -u +%FT%TZ))"; "$stage" ;;
    *) echo "unknown stage '$stage' (baselines dp probes sp budget doc)" >&2; exit 2 ;;
  esac
done
if [[ ${#FAILED[@]} -gt 0 ]]; then
  printf 'failed (see the log above; run the script again to retry): %s\n' "${FAILED[@]}" >&2
  exit 1
fi
