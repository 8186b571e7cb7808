#!/usr/bin/env bash
# A three-runner Tenure cluster on one machine: failover, nothing lost, drain.
#
#   bash examples/cluster/demo.sh
#
# It builds the tenure binary into a temporary directory, starts the
# infrastructure (`tenure dev --runners 0`: embedded etcd and S3) and three
# `tenure run` processes, submits tasks, kills one runner with SIGKILL and
# shows its shards moving to the others, checks that every task completed,
# drains a second runner with `tenure drain`, and stops everything. Every
# wait polls a condition with a deadline. See README.md beside this script.
#
# Environment:
#   DEMO_PORT_BASE  first of the loopback ports used (default 24790): etcd
#                   client +0, etcd peer +1, S3 +2, runner admin +11..+13.
#   DEMO_TASKS      tasks to submit (default 50), half before the kill and
#                   half after.
#   DEMO_KEEP=1     keep the temporary directory (binary, data, logs).
set -euo pipefail

for tool in go jq; do
	command -v "$tool" >/dev/null || {
		echo "demo: $tool is required" >&2
		exit 1
	}
done
((BASH_VERSINFO[0] >= 4)) || {
	echo "demo: bash 4 or later is required" >&2
	exit 1
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
port_base=${DEMO_PORT_BASE:-24790}
ntasks=${DEMO_TASKS:-50}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tenure-demo.XXXXXX")
bin=$tmp/bin/tenure
data=$tmp/data
cfg=$data/tenure.yaml
logs=$tmp/logs
mkdir -p "$tmp/bin" "$logs"

dev_pid=""
declare -A runner_pid=() # runner id -> pid
refs=()                  # task refs submitted

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() {
	echo "demo: $*" >&2
	exit 1
}

# stop_pid sends SIGTERM and waits up to $2 seconds, then SIGKILLs.
stop_pid() {
	local pid=$1 grace=$2 deadline
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + grace))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			echo "demo: pid $pid still running after ${grace}s: SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	# Runners first, while etcd is up, so that they hand over and revoke
	# their leases; then the infrastructure.
	local id stoppers=()
	for id in "${!runner_pid[@]}"; do
		stop_pid "${runner_pid[$id]}" 40 &
		stoppers+=($!)
	done
	# Only the stoppers: a bare `wait` would also wait for tenure dev.
	((${#stoppers[@]} == 0)) || wait "${stoppers[@]}"
	if [[ -n $dev_pid ]]; then
		stop_pid "$dev_pid" 20
	fi
	if ((status != 0)); then
		echo "demo: failed (exit $status); last log lines:" >&2
		local f
		for f in "$logs"/*.log; do
			[[ -e $f ]] || continue
			echo "--- $f" >&2
			tail -n 15 "$f" >&2
		done
	fi
	if [[ ${DEMO_KEEP:-} == 1 ]]; then
		echo "demo: kept $tmp"
	else
		rm -rf "$tmp"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tenure() { "$bin" --config "$cfg" "$@"; }

# The long-running processes get sessions of their own (where setsid
# exists), so that a Ctrl-C in the terminal reaches this script alone and
# its cleanup stops them in order: runners first, while etcd is up. (A
# runner that got the Ctrl-C too would take cleanup's SIGTERM as a second
# signal and exit without handing over.)
detach=()
if command -v setsid >/dev/null; then
	detach=(setsid)
fi

# check_alive fails the demo if the infrastructure or a runner that should
# be running has exited.
check_alive() {
	[[ -z $dev_pid ]] || kill -0 "$dev_pid" 2>/dev/null || die "tenure dev exited (its log is below)"
	local id
	for id in "${!runner_pid[@]}"; do
		kill -0 "${runner_pid[$id]}" 2>/dev/null || die "runner $id exited (its log is below)"
	done
}

# wait_for TIMEOUT WHAT COMMAND... polls COMMAND every 200ms until it
# succeeds, for at most TIMEOUT seconds.
wait_for() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		check_alive
		((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for $what"
		sleep 0.2
	done
}

status_json() { tenure status --json; }

# all_owned N: N runners are registered and every shard is owned.
all_owned() {
	status_json | jq -e --argjson n "$1" '.shards_unowned == 0 and (.runners | length) == $n' >/dev/null
}

# completed_count prints how many tasks are completed. It reads `task list
# --json` as a JSON array, an object with a "tasks" array, or one task per
# line.
completed_count() {
	tenure task list --status completed --limit 1000 --json |
		jq -s '[.[] | if type == "array" then .[] elif type == "object" and has("tasks") then .tasks[] else . end] | length'
}

all_completed() { (($(completed_count) >= $1)); }

# drained ID: the runner owns no shard and every shard is owned.
drained() {
	status_json | jq -e --arg id "$1" \
		'.shards_unowned == 0 and ([.runners[] | select(.id == $id) | .owned] == [0])' >/dev/null
}

# submit TYPE INPUT [ENTITY] submits one task and records its ref.
submit() {
	local args=(task submit "$1" --input "$2" --json)
	[[ -z ${3:-} ]] || args+=(--entity "$3")
	local ref
	ref=$(tenure "${args[@]}" | jq -r '.shard + "/" + .id')
	[[ $ref == */*/* ]] || die "task submit $1: no task ref in its output"
	refs+=("$ref")
}

# submit_batch FROM TO submits tasks FROM..TO: every third sleeps 200ms,
# the others echo; every fourth is addressed to one of four entities, whose
# tasks run one at a time, in order.
submit_batch() {
	local i
	for ((i = $1; i <= $2; i++)); do
		local entity=""
		((i % 4 != 0)) || entity="user-$((i % 16 / 4))"
		if ((i % 3 == 0)); then
			submit sleep '{"ms":200}' "$entity"
		else
			submit echo "{\"i\":$i}" "$entity"
		fi
	done
	echo "submitted tasks $1..$2"
}

start_runner() {
	local id=$1 port=$2
	"${detach[@]}" "$bin" --config "$cfg" run --runner-id "$id" --admin-addr "127.0.0.1:$port" \
		</dev/null >"$logs/$id.log" 2>&1 &
	runner_pid[$id]=$!
	echo "runner $id: pid ${runner_pid[$id]}, admin http://127.0.0.1:$port (metrics at /metrics)"
}

say "Building tenure into $tmp/bin"
(cd "$repo" && go build -o "$bin" ./cmd/tenure)

say "Starting the infrastructure: tenure dev --runners 0"
"${detach[@]}" "$bin" dev --runners 0 --data "$data" \
	--etcd-addr "127.0.0.1:$port_base" --etcd-peer-addr "127.0.0.1:$((port_base + 1))" \
	--s3-addr "127.0.0.1:$((port_base + 2))" </dev/null >"$logs/dev.log" 2>&1 &
dev_pid=$!
wait_for 60 "tenure dev to write $cfg" test -s "$cfg"
cat "$logs/dev.log"

say "Starting three runners"
for i in 1 2 3; do
	start_runner "demo-$i" $((port_base + 10 + i))
done
wait_for 60 "3 runners owning every shard" all_owned 3
tenure status

half=$((ntasks / 2))
say "Submitting tasks 1..$half (echo, and sleep {\"ms\":200}; some addressed to an entity)"
submit_batch 1 "$half"

victim=demo-2
say "Killing runner $victim with SIGKILL (no handover: its shards stay locked until its lease expires)"
kill -KILL "${runner_pid[$victim]}"
wait "${runner_pid[$victim]}" 2>/dev/null || true
unset "runner_pid[$victim]"
killed_at=$SECONDS
tenure status

say "Submitting tasks $((half + 1))..$ntasks while $victim's shards are orphaned"
submit_batch $((half + 1)) "$ntasks"

say "Waiting for the survivors to take $victim's shards over (bounded by lease_ttl + a watch round trip)"
shown=-1
until all_owned 2 2>/dev/null; do
	check_alive
	elapsed=$((SECONDS - killed_at))
	((elapsed < 60)) || die "shards not re-owned within 60s of the kill"
	if ((elapsed >= shown + 3)); then
		echo "-- ${elapsed}s after the kill:"
		tenure status || true
		shown=$elapsed
	fi
	sleep 0.2
done
echo "every shard owned again about $((SECONDS - killed_at))s after the kill:"
tenure status

say "Waiting for all ${#refs[@]} tasks to complete"
wait_for 120 "${#refs[@]} completed tasks" all_completed "${#refs[@]}"
# Check each one, and find the task that waited longest between its
# submission and its first claim: one of demo-2's, held up by the crash.
moved="" moved_wait=-1
for ref in "${refs[@]}"; do
	read -r st waited < <(tenure task get "$ref" --json | jq -r '
		def secs: sub("\\.[0-9]+"; "") | fromdateiso8601;
		[.status, ((([.history[] | select(.event == "claimed" or .event == "taken_over")][0].at // .created_at) | secs) - (.created_at | secs))] | @tsv')
	[[ $st == completed ]] || die "task $ref is $st, want completed"
	if ((waited > moved_wait)); then
		moved=$ref moved_wait=$waited
	fi
done
echo "all ${#refs[@]} tasks completed; none lost to the kill"
echo "the task that waited longest for its shard (${moved_wait}s between submission and claim):"
tenure task history "$moved"

say "Draining demo-3: weight 0, its shards handed over gracefully"
tenure drain demo-3
wait_for 30 "demo-3 to own no shard, every shard owned" drained demo-3
tenure status

say "A task after the drain runs on the remaining runner"
tenure task submit echo --input '{"after":"drain"}' --wait

say "Done; stopping the runners (SIGTERM: graceful) and the infrastructure"
