#!/usr/bin/env bash
# ovr.sh FILE...: one-vs-rest training side by side with LIBLINEAR, at
# the same -c and -e (C=1, E=0.01 unless set): for each plain LIBSVM file,
# liblinear-train -s 2 and the coordinator (its default method, and each
# of METHODS, default "newton"), each RUNS times (default 3). Prints the
# median wall time and the largest peak RSS (GNU time), the objective F
# summed over the classes (svmeval), and the largest relative excess of a
# class's F over LIBLINEAR's ("worst": at most 1e-6 is the target).
# GAP, when set, adds each coordinator side again with -gap GAP (as
# METHOD+gap; GAP=0 is LIBLINEAR's test alone, one-vs-rest's default
# being -gap 1e-6). BINDIR (default /tmp/bin) holds coordinator and svmeval.
set -uo pipefail
bin=${BINDIR:-/tmp/bin}; runs=${RUNS:-3}; c=${C:-1}; e=${E:-0.01}; methods=${METHODS:-newton}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '%-14s %-8s %8s %9s %16s %10s\n' file side seconds peak_MB F_sum worst
for f in "$@"; do
	sides="liblinear auto $methods"
	if [ -n "${GAP:-}" ]; then
		for m in auto $methods; do sides="$sides $m+gap"; done
	fi
	for side in $sides; do
		: >"$tmp/times"
		for _ in $(seq "$runs"); do
			if [ "$side" = liblinear ]; then
				cmd=(liblinear-train -q -s 2 -c "$c" -e "$e" "$f" "$tmp/$side.model")
			else
				cmd=("$bin/coordinator" -q -c "$c" -e "$e" -method "${side%+gap}")
				[ "$side" = "${side%+gap}" ] || cmd+=(-gap "$GAP")
				cmd+=("$f" "$tmp/$side.model")
			fi
			/usr/bin/time -f '%e %M' -o "$tmp/t" "${cmd[@]}" >/dev/null 2>"$tmp/err" || { echo "$side failed on $f:"; tail -3 "$tmp/err"; }
			cat "$tmp/t" >>"$tmp/times"
		done
		"$bin/svmeval" -c "$c" "$f" "$tmp/$side.model" | awk '/objective/ {print $4}' >"$tmp/$side.F"
		python3 - "$f" "$side" "$tmp" <<-'PY'
		import sys, statistics as st
		f, side, tmp = sys.argv[1:]
		t = [l.split() for l in open(tmp + "/times") if l.strip()]
		secs = st.median(float(x[0]) for x in t); peak = max(int(x[1]) for x in t) / 1024
		F = [float(x) for x in open(tmp + "/" + side + ".F")]
		ref = [float(x) for x in open(tmp + "/liblinear.F")]
		worst = max((a - b) / abs(b) for a, b in zip(F, ref))
		print("%-14s %-8s %8.2f %9.1f %16.6f %10.2e" % (f.split("/")[-1][:14], side, secs, peak, sum(F), worst))
		PY
	done
done
