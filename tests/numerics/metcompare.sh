#!/bin/bash
# metcompare (the reported-loss comparison of torch-ref.sh and grad-accum.sh) on its own:
# agreement passes; a different, missing, null, NaN or infinite value fails; -0.0 equals
# 0.0; unreadable input is exit 2.
. "$(dirname "$0")/../lib/setup.sh"

MC=$METCOMPARE
cd "$TMPD"

ref='{"type":"step","step":1,"epoch":1,"loss":1.5,"lr":0.1,"accuracy":0.25}
{"type":"step","step":2,"epoch":1,"loss":0.0,"lr":0.1,"accuracy":0.5}
{"type":"eval","step":2,"epoch":1,"loss":1.25,"accuracy":0.75}'
summary='{"type":"summary","first_loss":1.5,"final_loss":0.0}'
printf '%s\n' "$ref" >ref.jsonl
# got FILE LINE1 LINE2 LINE3: a metrics file with these step/eval records and the summary.
got() {
	local f=$1
	shift
	{
		echo '{"type":"start"}'
		printf '%s\n' "$@"
		echo "$summary"
	} >"$f"
}
s1='{"type":"step","step":1,"epoch":1,"loss":1.5,"lr":0.1,"accuracy":0.25}'
s2='{"type":"step","step":2,"epoch":1,"loss":-0.0,"lr":0.1,"accuracy":0.5}'
ev='{"type":"eval","step":2,"epoch":1,"loss":1.25,"accuracy":0.75}'

# expect CODE WHAT ARGS...: metcompare ARGS exits CODE.
expect() {
	local code=$1 what=$2 rc=0 out
	shift 2
	out=$("$MC" "$@" 2>&1) || rc=$?
	[ "$rc" = "$code" ] || fail "$what: metcompare exited $rc, want $code: $out"
	echo "$what: exit $rc: $(echo "$out" | head -n 1)"
}

got ok.jsonl "$s1" "$s2" "$ev"
expect 0 "the same records (-0.0 against 0.0)" ok.jsonl ref.jsonl
got off.jsonl "${s1/1.5/1.5001}" "$s2" "$ev"
expect 1 "a loss off by 1e-4 relative" off.jsonl ref.jsonl 1e-5
expect 0 "the same within 1e-3" off.jsonl ref.jsonl 1e-3
got null.jsonl "${s1/1.5/null}" "$s2" "$ev"
expect 1 "a null loss" null.jsonl ref.jsonl
got nan.jsonl "${s1/1.5/NaN}" "$s2" "$ev"
expect 2 "a NaN loss (not JSON)" nan.jsonl ref.jsonl
got inf.jsonl "${s1/1.5/Infinity}" "$s2" "$ev"
expect 2 "an Infinity loss (not JSON)" inf.jsonl ref.jsonl
got big.jsonl "${s1/1.5/1e999}" "$s2" "$ev"
expect 2 "a loss that overflows a double" big.jsonl ref.jsonl
got noacc.jsonl "${s1/,\"accuracy\":0.25/}" "$s2" "$ev"
expect 1 "a step record without its accuracy" noacc.jsonl ref.jsonl
got lr.jsonl "${s1/0.1/0.2}" "$s2" "$ev"
expect 1 "another learning rate" lr.jsonl ref.jsonl
got short.jsonl "$s1" "$ev"
expect 1 "a step record missing" short.jsonl ref.jsonl
got noeval.jsonl "$s1" "$s2"
expect 1 "the eval record missing" noeval.jsonl ref.jsonl
printf '%s\n' "$s1" "$s2" "$ev" >nosummary.jsonl
expect 1 "no summary record" nosummary.jsonl ref.jsonl
printf '%s\n' "$s1" "$s2" "$ev" '{"type":"summary","first_loss":1.5,"final_loss":0.5}' >badsummary.jsonl
expect 1 "a summary whose final loss is not the last step's" badsummary.jsonl ref.jsonl
# Reference and NaN the other way round: a reference value that is not finite fails too.
printf '%s\n' "${s1/1.5/null}" "$s2" >nullref.jsonl
expect 1 "a null loss in the reference" ok.jsonl nullref.jsonl

# Progress lines as ddptrain prints them (6 decimals; accuracy in percent, 2 decimals).
cat >ok.out <<'OUT'
#  epoch          step         loss    acc_%      samples/s    elapsed_s      eta_s
       1      1/2          1.500000    25.00            100        0.001        0.0
       1      2/2          0.000000    50.00            100        0.002        0.0
# eval after step 2 (epoch 1): validation loss 1.250000, accuracy 75.00% (3 of 4)
# loss: first 1.500000, final 0.000000
OUT
expect 0 "progress lines that agree" --progress ok.out ok.jsonl ref.jsonl
sed 's/ 1.500000 / 1.500100 /' ok.out >off.out
expect 1 "a progress line's loss off" --progress off.out ok.jsonl ref.jsonl
sed 's/ 1.500000 / nan /' ok.out >nan.out
expect 1 "a progress line's loss nan" --progress nan.out ok.jsonl ref.jsonl
sed 's/ 25.00 / 50.00 /' ok.out >acc.out
expect 1 "a progress line's accuracy off" --progress acc.out ok.jsonl ref.jsonl
sed '/^# loss:/d' ok.out >noloss.out
expect 1 "no summary loss line" --progress noloss.out ok.jsonl ref.jsonl
sed 's/final 0.000000/final -nan/' ok.out >nanfinal.out
expect 1 "a summary loss line with nan" --progress nanfinal.out ok.jsonl ref.jsonl

expect 2 "a missing file" missing.jsonl ref.jsonl
expect 2 "a reference without records" ok.jsonl /dev/null
expect 2 "a bad tolerance" ok.jsonl ref.jsonl nan
expect 2 "a negative tolerance" ok.jsonl ref.jsonl -1
echo "metcompare: all cases as expected"
