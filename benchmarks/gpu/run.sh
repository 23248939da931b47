#!/usr/bin/env bash
# The GPU check, in one command (docs/gpu.md): installs the wheels benchmarks/gpu/fetch_wheels.sh packed (if the
# folder benchmarks/gpu/wheels/ is there), runs the GPU tests (tests/gpu/) and the speed benchmark stage by stage,
# each under a time limit, and writes OUT/gpu-report.json and OUT/gpu-report.md. One 10-minute command holds the
# checks (about 5 minutes on one H200, 2026-11-30) and part of bench-steps; --only runs the rest (docs/gpu.md).
#
#   bash benchmarks/gpu/run.sh OUT                        # on a CUDA machine
#   bash benchmarks/gpu/run.sh OUT --device cpu --tiny    # the dry run: every stage on the CPU, tiny shapes
#
# Options: --device cuda|cpu (default cuda), --tiny (tiny shapes, few steps), --dtype (the benchmark's; default
# bfloat16 on cuda, float32 on cpu), --no-install (use this Python as it is), --budget SECONDS (default 560: every
# stage's limit is cut to what is left of it, keeping 30 s for the report), --only STAGE,... (only these stages, e.g.
# install,environment,bench-steps; the others are reported not run). Environment: PYTHON (default python3),
# VASWANI_GPU_WORK (scratch folder: the environment, pytest's files; default a new folder under /tmp; never inside
# OUT, which should hold only what is to be read), VASWANI_GPU_STEPS_PARTS (bench-steps' parts, e.g. big or
# shapes,base; default all). Exit status 0 when every check passed, 1 otherwise.
set -uo pipefail

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}
[[ ${1:-} == -h || ${1:-} == --help ]] && usage 0
[[ $# -ge 1 && $1 != -* ]] || usage
OUT=$1
shift
DEVICE=cuda TINY=0 INSTALL=auto BUDGET=560 DTYPE="" ONLY=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --device) DEVICE=${2:?--device needs a value}; shift 2 ;;
        --tiny) TINY=1; shift ;;
        --dtype) DTYPE=${2:?--dtype needs a value}; shift 2 ;;
        --no-install) INSTALL=no; shift ;;
        --budget) BUDGET=${2:?--budget needs a value}; shift 2 ;;
        --only) ONLY=${2:?--only needs a list of stages}; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; usage ;;
    esac
done
[[ -z $DTYPE ]] && { [[ $DEVICE == cpu ]] && DTYPE=float32 || DTYPE=bfloat16; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$OUT/logs" && OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/stages.jsonl "$OUT"/records.jsonl "$OUT"/junit-*.xml "$OUT"/bench-*.json "$OUT"/gpu-report.* \
    "$OUT"/install.json "$OUT"/environment.json "$OUT"/logs/*.log
WORK=${VASWANI_GPU_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/vaswani-gpu.XXXXXX")}
mkdir -p "$WORK"
PY=${PYTHON:-python3}
START=$(date +%s)
DEADLINE=$((START + BUDGET))
RESERVE=30
cd "$REPO" || exit 2
if [[ $DEVICE == cpu ]]; then
    # One thread a process: on a small shared CPU, two threads contending with other jobs made every step 4x slower.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi

json_string() { "$PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || echo '""'; }

record() { # record NAME STATUS SECONDS LIMIT RETURNCODE REASON
    local line='{"name": "%s", "status": "%s", "started": %s, "seconds": %s, "limit": %s, "returncode": %s, '
    printf "$line"'"reason": %s, "log": "logs/%s.log"}\n' "$1" "$2" $(($(date +%s) - ${3:-0})) "${3:-0}" "${4:-0}" \
        "${5:-null}" "$(json_string "${6:-}")" "$1" >> "$OUT/stages.jsonl"
}

reap() { # every process still carrying this stage's mark (torchrun's workers run in sessions of their own)
    local mark=$1 environ pid
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        [[ $pid == "$$" ]] && continue
        # grep opens the file itself, so -s silences what an unreadable one gives: a process gone since the glob
        # (No such file), a zombie (No such process), another user's (Permission denied; not ours to kill).
        if grep -qsxzF "VASWANI_GPU_STAGE=$mark" "$environ"; then
            kill -KILL "$pid" 2>/dev/null
        fi
    done
}

stage() { # stage NAME LIMIT_S COMMAND...: runs COMMAND within min(LIMIT_S, what the budget leaves), logged
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - RESERVE - $(date +%s)))
    if [[ -n $ONLY && ",$ONLY," != *",$name,"* ]]; then
        record "$name" "not run" 0 "$limit" null "--only $ONLY"
        return 1
    fi
    if ((left < 10)); then
        record "$name" "not run" 0 "$limit" null "the time budget (${BUDGET} s) was spent"
        echo "== $name: not run, the time budget (${BUDGET} s) was spent"
        return 1
    fi
    ((limit > left)) && limit=$left
    echo "== $name (at most ${limit} s)"
    local started=$(date +%s) mark="$$-$name"
    VASWANI_GPU_STAGE=$mark timeout --kill-after=15 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
    local rc=$? status=passed
    reap "$mark"
    ((rc != 0)) && status=failed
    ((rc == 124 || rc == 137)) && status="timed out"
    record "$name" "$status" $(($(date +%s) - started)) "$limit" "$rc" ""
    tail -n 4 "$OUT/logs/$name.log" | cut -c1-300
    echo "-> $status ($(($(date +%s) - started)) s)"
    return $rc
}

# 1. The carried wheels, into an environment of their own in front of the image's packages.
WHEELS=$REPO/benchmarks/gpu/wheels
if [[ $INSTALL == no ]]; then
    record install "not run" 0 0 null "--no-install: this Python as it is"
elif [[ ! -f $WHEELS/manifest.json ]]; then
    record install "not run" 0 0 null "no benchmarks/gpu/wheels/ (bash benchmarks/gpu/fetch_wheels.sh makes it)"
    echo "== install: no wheels folder, using $PY as it is"
elif stage install 120 "$PY" benchmarks/gpu/install.py --wheels "$WHEELS" --venv "$WORK/venv" \
    --report "$OUT/install.json"; then
    PY=$WORK/venv/bin/python
    export PATH="$WORK/venv/bin:$PATH"
fi

# 2. The machine and versions; every check, as pytest collects them.
export VASWANI_GPU_DEVICE=$DEVICE VASWANI_GPU_TINY=$TINY VASWANI_GPU_RECORD=$OUT/records.jsonl
tiny_flag=()
((TINY)) && tiny_flag=(--tiny)
PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts= -q -rA)
describe() {
    stage environment 60 "$PY" benchmarks/gpu/report.py environment "$OUT" --device "$DEVICE" "${tiny_flag[@]}"
    stage collect 60 "${PYTEST[@]}" --collect-only tests/gpu
}

# 3. The checks, a stage per test file: one that hangs is stopped without taking the others' time.
tests() { # tests NAME LIMIT_S [PATH...]: tests/gpu/test_gpu_NAME.py, or the PATHs
    local name=$1 limit=$2
    shift 2
    (($#)) || set -- "tests/gpu/test_gpu_$name.py"
    stage "tests-$name" "$limit" "${PYTEST[@]}" "$@" --junitxml="$OUT/junit-tests-$name.xml" \
        --basetemp="$WORK/pytest-$name"
}

# 4. The speed benchmark, a bench.py call a stage: training at the paper's batch, base and big (one process: the
# matmul ceilings measured once, while the models are prepared); the training step taken apart (steps.py: its
# phases in float32 and bf16 over varied shapes, torch.compile, base and big eager and compiled against MarianMT);
# then generation (no ceilings).
bench() { # bench NAME LIMIT_S BENCH_STAGE...
    local name=$1 limit=$2
    shift 2
    stage "bench-$name" "$limit" "$PY" benchmarks/gpu/bench.py "$@" --device "$DEVICE" --dtype "$DTYPE" \
        "${tiny_flag[@]}" --out "$OUT"
}
benchmark() {
    bench training 200 training-base training-big
    local parts=()
    [[ -n ${VASWANI_GPU_STEPS_PARTS:-} ]] && parts=(--parts ${VASWANI_GPU_STEPS_PARTS//,/ })
    stage bench-steps 300 "$PY" benchmarks/gpu/steps.py --device "$DEVICE" --dtype "$DTYPE" "${tiny_flag[@]}" \
        "${parts[@]}" --out "$OUT"
    bench generation 180 generation
}

if [[ $DEVICE == cpu ]]; then
    # The dry run: the benchmark's stages beside the checks (each process on one thread), since a CPU's figures
    # mean nothing here; the checks in one pytest process, since on a CPU a process start costs more than most
    # tiny checks (the stage per file is the GPU's, for its time limits).
    describe
    benchmark > "$OUT/logs/lane.out" 2>&1 &
    tests all 400 tests/gpu
    wait
    cat "$OUT/logs/lane.out"
else
    # The checks whose figures are outcomes and differences, not times, side by side: accelerate's launches (mostly
    # process starts) beside the machine's description, the collection and the equivalence checks. Then, alone on
    # the device, the timed ones: training (compile and step times), memory (step times), the benchmark.
    tests accelerate 200 > "$OUT/logs/lane.out" 2>&1 &
    describe
    tests equivalence 120
    wait
    cat "$OUT/logs/lane.out"
    tests training 280  # 65 s on 2026-11-30, and the compile choice's run: some 80 s of compiling (docs/gpu.md)
    tests memory 90
    benchmark
fi

# 5. The report, always.
timeout 60 "$PY" benchmarks/gpu/report.py build "$OUT"
status=$?
echo
cat "$OUT/gpu-report.md" 2>/dev/null | cut -c1-400
echo
echo "reports: $OUT/gpu-report.md and $OUT/gpu-report.json; logs in $OUT/logs ($(($(date +%s) - START)) s in all)"
[[ -z ${VASWANI_GPU_WORK:-} ]] && rm -rf "$WORK"
exit $status
