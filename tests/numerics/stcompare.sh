#!/bin/bash
# The comparison tool the other tests trust: tests/lib/stcompare on files written here
# byte by byte. Identical and within-tolerance files pass, a larger difference fails;
# a NaN or infinity in either file fails in both modes with one line naming the file,
# the tensor, the element and the value (even a bit-identical NaN); -0.0 equals 0.0
# within a tolerance but not bit for bit; a missing file or a bad TOL is exit 2.
. "$(dirname "$0")/../lib/setup.sh"

cd "$TMPD"

# le32 HEX: the 4 little-endian bytes of the 32-bit word HEX (8 hex digits).
le32() {
	printf '\\x%s\\x%s\\x%s\\x%s' "${1:6:2}" "${1:4:2}" "${1:2:2}" "${1:0:2}"
}

# mkst FILE NAME=HEX,HEX,... ...: a safetensors file of 1-D float32 tensors, each
# value given as its IEEE bits (3f800000 is 1.0): the 8-byte little-endian header
# length, the JSON header padded with spaces to a multiple of 8, the data.
mkst() {
	local file=$1 hdr="" data="" off=0 name vals n sep="" len i
	shift
	for t in "$@"; do
		name=${t%%=*}
		vals=${t#*=}
		n=0
		for v in ${vals//,/ }; do
			data+=$(le32 "$v")
			n=$((n + 1))
		done
		hdr+="$sep\"$name\":{\"dtype\":\"F32\",\"shape\":[$n],\"data_offsets\":[$off,$((off + 4 * n))]}"
		off=$((off + 4 * n))
		sep=,
	done
	hdr="{$hdr}"
	while [ $((${#hdr} % 8)) -ne 0 ]; do hdr+=" "; done
	len=${#hdr}
	{
		for i in 0 1 2 3 4 5 6 7; do printf '%b' "$(printf '\\x%02x' $(((len >> (8 * i)) & 255)))"; done
		printf '%s' "$hdr"
		printf '%b' "$data"
	} >"$file"
}

# expect CODE SUBSTRING ARGS...: stcompare ARGS exits CODE with one line of output
# (standard output and error together) holding SUBSTRING.
expect() {
	local code=$1 want=$2 rc=0 out
	shift 2
	out=$("$STCOMPARE" "$@" 2>&1) || rc=$?
	[ "$rc" -eq "$code" ] || fail "stcompare $*: exit $rc, want $code: $out"
	[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "stcompare $*: want one line: $out"
	case $out in *"$want"*) ;; *) fail "stcompare $*: output lacks '$want': $out" ;; esac
	cases=$((cases + 1))
}
cases=0

ONE=3f800000 TWO=40000000 THREE=40400000 FOUR=40800000
NAN=7fc00000 INF=7f800000 NINF=ff800000 ZERO=00000000 NZERO=80000000

mkst ref.st w=$ONE,$TWO,$THREE b=$ONE,$TWO
mkst same.st w=$ONE,$TWO,$THREE b=$ONE,$TWO
mkst close.st w=$ONE,$TWO,$THREE b=3f800001,$TWO   # 1 + 2^-23: relative error 6e-8
mkst far.st w=$ONE,$TWO,$FOUR b=$ONE,$TWO           # relative error 1/4 (max|a-b| / max|b|)
mkst nan.st w=$ONE,$TWO,$THREE b=$ONE,$NAN
mkst inf.st w=$ONE,$TWO,$THREE b=$INF,$TWO
mkst ninf.st w=$ONE,$TWO,$NINF b=$ONE,$TWO
mkst allnan.st w=$NAN,$NAN,$NAN b=$NAN,$NAN
mkst w123.st w=$ONE,$TWO,$THREE
mkst wnan.st w=$NAN,$NAN,$NAN
mkst pzero.st w=$ZERO,$ONE
mkst nzero.st w=$NZERO,$ONE

expect 0 "bit-identical (2 tensors)" --exact ref.st same.st
expect 0 "max relative error 0 " ref.st same.st
expect 0 "tolerance 1e-05" ref.st close.st
expect 0 "tolerance 1e-06" ref.st close.st 1e-6
expect 1 "max relative error 0.25 (w)" ref.st far.st 1e-5
expect 1 "w differs" --exact ref.st far.st
expect 0 "max relative error 0.25 (w), tolerance 0.5" ref.st far.st 0.5

for mode in "" --exact; do
	# $mode unquoted: empty for the tolerance mode.
	expect 1 "B (nan.st): tensor b element 1 (counting from 0) is nan; weights must be finite" $mode ref.st nan.st
	expect 1 "A (nan.st): tensor b element 1 (counting from 0) is nan" $mode nan.st ref.st
	expect 1 "A (nan.st): tensor b element 1 (counting from 0) is nan" $mode nan.st nan.st
	expect 1 "B (inf.st): tensor b element 0 (counting from 0) is inf" $mode ref.st inf.st
	expect 1 "A (ninf.st): tensor w element 2 (counting from 0) is -inf" $mode ninf.st ref.st
	expect 1 "A (allnan.st): tensor w element 0 (counting from 0) is nan" $mode allnan.st allnan.st
	expect 1 "A (wnan.st): tensor w element 0 (counting from 0) is nan" $mode wnan.st w123.st
	expect 1 "B (wnan.st): tensor w element 0 (counting from 0) is nan" $mode w123.st wnan.st
done
expect 1 "B (inf.st): tensor b element 0 (counting from 0) is inf" ref.st inf.st 1e30

# -0.0 and 0.0: equal values, different bits.
expect 0 "max relative error 0 (w)" nzero.st pzero.st 0
expect 0 "max relative error 0 (w)" pzero.st nzero.st
expect 1 "w differs" --exact nzero.st pzero.st
expect 0 "bit-identical (1 tensors)" --exact nzero.st nzero.st

expect 2 "missing.st" ref.st missing.st
expect 2 "missing.st" --exact missing.st ref.st
expect 2 "usage: stcompare [--exact] A B [TOL]" ref.st
for tol in abc -1 nan inf -inf "" 1e-5x 1e999; do
	expect 2 "TOL '$tol' is not a finite number >= 0" ref.st same.st "$tol"
done
expect 2 "is not a finite number >= 0" --exact ref.st same.st nan
echo "stcompare: $cases cases"
