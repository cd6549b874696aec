#!/bin/bash
# completion/ddptrain.bash, sourced into bash: long flags from ddptrain --help
# (all of them, and only them), the values of --mode, --device and --backend,
# .npy names for --inputs/--targets and .safetensors names for the weight
# files, in both the --flag=value and the --flag value spellings, also after a
# flag abbreviated as ddptrain allows; and after a launcher (mpirun -np 2 ddptrain
# --lo<TAB>), also when bash-completion loads it on demand.
. "$(dirname "$0")/../lib/setup.sh"

COMPLETION=$TOP_SRCDIR/completion/ddptrain.bash
# shellcheck source=../completion/ddptrain.bash
. "$COMPLETION"
[ "$(complete -p ddptrain)" = "complete -F _ddptrain ddptrain" ] || fail "not registered: $(complete -p ddptrain)"

# line WORD...: complete the last word of the command line WORD... (WORD[0] the command:
# ddptrain, or a launcher) as bash would: through the function registered for WORD[0]
# (its full path, else its name), with '=' a word break ("--mode=d" is the words
# --mode = d); prints the replies sorted, on one line.
line() {
	local fn
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMP_LINE="${COMP_WORDS[*]}"
	COMP_POINT=${#COMP_LINE}
	COMPREPLY=()
	fn=$({ complete -p "$1" || complete -p "${1##*/}"; } 2>/dev/null | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
	[ -n "$fn" ] || { echo "no completion function for $1"; return; }
	"$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	if [ ${#COMPREPLY[@]} -gt 0 ]; then printf '%s\n' "${COMPREPLY[@]}" | sort | paste -sd ' ' -; else echo; fi
}
BIN=$DDPTRAIN
# comp WORD...: the line "ddptrain WORD...".
comp() { line "$BIN" "$@"; }
checks=0
# expect_line WANT WORD...: the line WORD... completes to WANT.
expect_line() {
	local want=$1 got
	shift
	got=$(line "$@")
	[ "$got" = "$want" ] || fail "${*/#$BIN/ddptrain}<TAB>: got '$got', want '$want'"
	echo "${*/#$BIN/ddptrain}<TAB> -> $got"
	checks=$((checks + 1))
}
# expect WANT WORD...: the line "ddptrain WORD..." completes to WANT.
expect() { expect_line "$1" "$BIN" "${@:2}"; }

cd "$TMPD" || fail "cd $TMPD"
mkdir -p data runs
: >x.npy
: >y.npy
: >notes.txt
: >model.safetensors
: >ckpt.safetensors
: >data/train.npy

expect "--mode= --momentum=" --mo
expect "--mode=" --mod
expect "--quiet" --qu
expect "--samples= --save-best= --save= --seed= --shuffle --stop-file= --straggler-warn=" --s
expect "ddp dp" --mode =
expect "ddp" --mode = dd
expect "auto cpu cuda" --device =
expect "nccl" --backend = n
expect "ddp dp" --mode ""
expect "auto mpi nccl" --backend ""
expect "cross-entropy mse" --loss =
expect "constant cosine linear" --lr-schedule ""
expect "x.npy" --val-targets = x
expect "data runs x.npy y.npy" --inputs =
expect "x.npy" --targets = x
expect "data/train.npy" --inputs = data/
expect "ckpt.safetensors data model.safetensors runs" --init =
expect "model.safetensors" --save = mo
expect "ckpt.safetensors" --resume = c
expect "ckpt.safetensors" --checkpoint = c
expect "ckpt.safetensors" --init c
expect "data runs x.npy y.npy" --inputs ""
expect "" --lr =
expect "" --epochs ""

# Abbreviated flags (ddptrain takes a unique prefix): their values complete too;
# an ambiguous prefix completes no value.
expect "ddp dp" --mod =
expect "mpi" --back = m
expect "x.npy" --targ x
expect "" --no =
expect "--mod=ddp --mod=dp" --mod=d

# '=' not a word break: the whole "--mode=d" is the word, and so is the reply.
expect "--mode=ddp --mode=dp" --mode=d
expect "--inputs=x.npy" --inputs=x

# Every flag of --help, and no other.
want=$("$DDPTRAIN" --help | sed -n 's/^  \(--[a-z0-9-]*\)\(=\)\{0,1\}.*/\1\2/p' | sort | paste -sd ' ' -)
[ -n "$want" ] || fail "no flags in --help"
got=$(comp --)
[ "$got" = "$want" ] || fail "ddptrain --<TAB>: got '$got', want --help's '$want'"
echo "ddptrain --<TAB> -> $(echo "$got" | wc -w) flags, those of --help"

# Under a launcher, as the README launches it: the line from the word ddptrain on
# completes as ddptrain's, through the function bash would call for the launcher.
expect_line "--log-every= --log-seconds= --loss=" mpirun -np 2 "$BIN" --lo
expect_line "ddp dp" mpirun --oversubscribe -np 4 "$BIN" --mode = ""
expect_line "model.safetensors" mpiexec -n 2 "$BIN" --save mo
expect_line "--quiet" orterun -np 2 "$BIN" --epochs=5 --qu
expect_line "" mpirun -np # before ddptrain: the launcher's own (here none: file names)
# A launcher that had a completion keeps it before the word ddptrain.
(
	_their_mpirun() { COMPREPLY=(--theirs); }
	complete -F _their_mpirun mpirun
	. "$COMPLETION"
	expect_line "--theirs" mpirun --
	expect_line "--quiet" mpirun -np 2 "$BIN" --qu
) || exit 1
checks=$((checks + 2))

# bash-completion loads completions on demand, by the command's name: from an install
# (the file as ddptrain, mpirun a link to it), the first mpirun<TAB> loads this file.
if [ -r /usr/share/bash-completion/bash_completion ]; then
	mkdir -p share/bash-completion/completions
	cp "$COMPLETION" share/bash-completion/completions/ddptrain
	ln -s ddptrain share/bash-completion/completions/mpirun
	XDG_DATA_DIRS=$TMPD/share BIN=$BIN bash -c '
		. /usr/share/bash-completion/bash_completion
		complete -r ddptrain mpirun 2>/dev/null
		_completion_loader mpirun
		complete -p mpirun' >loaded 2>&1 || true
	grep -q -- '-F _ddptrain_launcher mpirun$' loaded ||
		fail "bash-completion did not load the launcher completion from completions/mpirun: $(cat loaded)"
	echo "bash-completion, on demand: $(cat loaded)"
else
	echo "completion: no bash-completion here: its on-demand loading not tried"
fi

# No ddptrain there: no flags, no noise.
BIN=$TMPD/none/ddptrain
[ -z "$(comp --m 2>&1)" ] || fail "a missing binary gave: $(comp --m 2>&1)"
echo "completion: $((checks + 2)) cases ok"
