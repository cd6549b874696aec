#!/bin/bash
# Hostile input files: every file in tests/corpus/ (made by make-corpus.py) is
# broken in one way, and ddptrain must refuse each with its one-line message
# naming the flag and the file, exit 1 on every rank, alone and (a quarter of
# them) at 2 ranks, promptly, and leave no output file behind. The good files
# beside them must train.
. "$(dirname "$0")/../lib/setup.sh"

C=$TOP_SRCDIR/tests/corpus
mkdir -p "$TMPD/out"
SAVE="--save=$TMPD/out/w.st --metrics=$TMPD/out/m.jsonl"

checks=0
# expect SUBSTRING NP ARGS...: exit 1 on every one of NP ranks, SUBSTRING in the only
# message, and no output file left behind.
expect() {
	expect_fail 1 "$@"
	[ -z "$(ls -A "$TMPD/out")" ] || fail "left files behind: $(ls -A "$TMPD/out"): $*"
	checks=$((checks + 1))
}

# The good files are good: otherwise every case below would prove nothing.
run_mpi 2 --inputs="$C/good-x.npy" --targets="$C/good-y.npy" --init="$C/good.safetensors" \
	--max-steps=2 --quiet || fail "the good corpus files do not train"
# The same inputs stored big-endian and in Fortran order train to the same weights.
for f in good-x good-x-big-endian good-x-fortran; do
	run_mpi 1 --inputs="$C/$f.npy" --targets="$C/good-y.npy" --init="$C/good.safetensors" \
		--max-steps=3 --quiet --save="$TMPD/$f.st" || fail "$f.npy does not train"
done
cmp "$TMPD/good-x.st" "$TMPD/good-x-big-endian.st" || fail "big-endian inputs train differently"
cmp "$TMPD/good-x.st" "$TMPD/good-x-fortran.st" || fail "Fortran-order inputs train differently"

# .npy cases: file, then the message after "--inputs: FILE: ".
npy_cases=(
	npy-bad-magic.npy "not a .npy file (bad magic)"
	npy-zip-file.npy "not a .npy file (bad magic)"
	npy-too-short.npy "too short to be a .npy file (7 bytes)"
	npy-version-4.npy "unsupported .npy format version 4.0"
	npy-version-1-1.npy "unsupported .npy format version 1.1"
	npy-header-past-end.npy "truncated .npy header: header length 65535 runs past the end of the file (200 bytes)"
	npy-header-past-end-v2.npy "truncated .npy header: header length 4294967295 runs past the end of the file (202 bytes)"
	npy-digits-at-eof.npy "malformed .npy header (shape)"
	npy-truncated-data.npy "truncated: header says 40 x 10 but the file holds 1596 of 1600 data bytes"
	npy-trailing-data.npy "8 bytes of trailing data after the 40 x 10 array"
	npy-shape-overflow.npy "shape 1099511627776 x 16777216 is too large"
	npy-dim-too-large.npy ".npy dimension too large"
	npy-shape-negative.npy "malformed .npy header (shape)"
	npy-shape-nan.npy "malformed .npy header (shape)"
	npy-dtype-int.npy "dtype '<i4' is not supported (need '<f4' or '<f8')"
	npy-dtype-object.npy "dtype '|O' is not supported"
	npy-dtype-control-char.npy "dtype '<f?4' is not supported"
	npy-dtype-nul.npy "malformed .npy header (descr)"
	npy-1d.npy "array has 1 dimensions, need 2 (rows, columns)"
	npy-duplicate-key.npy "duplicate key 'shape' in .npy header"
	npy-missing-shape.npy ".npy header lacks shape"
	npy-unknown-key.npy "unexpected key 'offset' in .npy header"
	npy-text-after-dict.npy "malformed .npy header (text after the dict)"
	npy-unterminated-dict.npy "malformed .npy header (no closing '}')"
	npy-empty.npy "empty array (0 x 10)"
)
# safetensors cases: file, then the message after "--init: FILE: ".
st_cases=(
	st-too-short.safetensors "too short to be a safetensors file (4 bytes)"
	st-npy-file.safetensors "bad safetensors header length 379676406402707: runs past the end of the file (1728 bytes)"
	st-header-past-end.safetensors "bad safetensors header length 4096: runs past the end of the file (80 bytes)"
	st-header-length-200mib.safetensors "bad safetensors header length 209715200: runs past the end of the file (16 bytes)"
	st-header-length-zero.safetensors "bad safetensors header length 0 (the format allows 2 to 104857600)"
	st-not-json.safetensors "safetensors header is not valid JSON: '[' or '{' expected near 'this'"
	st-not-object.safetensors "safetensors header is not a JSON object"
	st-deep-nesting.safetensors "safetensors header is not valid JSON: maximum parsing depth reached"
	st-entry-malformed.safetensors "malformed safetensors header entry 'net1.weight'"
	st-dtype-unknown.safetensors "tensor 'net1.weight' has unknown dtype 'Q7'"
	st-dtype-int.safetensors "tensor 'net1.weight' has dtype I32; need F32 or F64"
	st-shape-negative.safetensors "tensor 'net1.weight' has a bad shape"
	st-shape-fraction.safetensors "tensor 'net1.weight' has a bad shape"
	st-shape-overflow.safetensors "tensor 'net1.weight' is too large (shape product over 2^42)"
	st-shape-mismatch.safetensors "tensor 'net1.weight' has 8 bytes but its shape needs 12"
	st-too-many-dims.safetensors "tensor 'net1.weight' has too many dimensions"
	st-offsets-out-of-range.safetensors "tensor 'net1.weight' lies outside the file (offsets 0..4096, data 8 bytes)"
	st-offsets-huge.safetensors "safetensors header is not valid JSON: too big integer"
	st-offsets-reversed.safetensors "tensor 'net1.weight' has data_offsets [8, 0] that run backwards"
	st-offsets-negative.safetensors "tensor 'net1.weight' has bad data_offsets"
	st-overlap.safetensors "tensor 'net1.bias' overlaps the one before it"
	st-gap.safetensors "tensor 'net1.bias' leaves a gap after the one before it"
	st-trailing-data.safetensors "data region is 668 bytes but the tensors cover 660 (8 bytes of trailing data)"
	st-duplicate-name.safetensors "safetensors header names a tensor twice: duplicate object key near '\"net1.bias\"'"
	st-missing-name.safetensors "no tensor 'net2.bias' (expected for --layers)"
	st-wrong-shape.safetensors "tensor 'net1.weight' has the wrong shape; --layers needs [10, 10]"
	st-name-control-char.safetensors "tensor name 'net1.weight?' contains a control character"
	st-name-too-long.safetensors "tensor name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' is too long (200 bytes, at most 127)"
	st-metadata-not-object.safetensors "__metadata__ is not an object"
	st-metadata-number.safetensors "__metadata__ value 'lr' is not a string"
	st-metadata-nan.safetensors "safetensors header is not valid JSON: invalid token near 'NaN'"
	st-nan-weights.safetensors "tensor 'net1.bias' element (9) (counting from 0) is nan, not a finite number: ddptrain starts only from finite weights"
)

# Every corpus file is listed above, and every listed file exists.
listed=$(printf '%s\n' "${npy_cases[@]}" "${st_cases[@]}" | grep -E '\.(npy|safetensors)$' | sort)
present=$(cd "$C" && ls *.npy *.safetensors | grep -v '^good' | sort)
[ "$listed" = "$present" ] || fail "corpus and case list differ: $(diff <(echo "$listed") <(echo "$present") | grep '^[<>]')"

# Every file alone (one process, no mpirun); every fourth also on 2 ranks, where the
# ranks must agree on the failure (every rank reads --inputs, only rank 0 --init).
for ((i = 0; i < ${#npy_cases[@]}; i += 2)); do
	f=$C/${npy_cases[i]}
	for np in alone $([ $((i % 8)) -eq 0 ] && echo 2); do
		expect "--inputs: $f: ${npy_cases[i + 1]}" $np --inputs="$f" --targets="$C/good-y.npy" $SAVE
	done
done
for ((i = 0; i < ${#st_cases[@]}; i += 2)); do
	f=$C/${st_cases[i]}
	for np in alone $([ $((i % 8)) -eq 0 ] && echo 2); do
		expect "--init: $f: ${st_cases[i + 1]}" $np --init="$f" $SAVE
	done
done
# The targets go through the same reader.
for f in npy-bad-magic.npy npy-digits-at-eof.npy npy-trailing-data.npy; do
	expect "--targets: $C/$f: " 2 --inputs="$C/good-x.npy" --targets="$C/$f" $SAVE
done
echo "hostile-files: $checks cases, each refused with its message once and exit 1 on every rank"
