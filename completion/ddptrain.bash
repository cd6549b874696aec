# bash completion for ddptrain                                -*- shell-script -*-
#
# The flags come from the --help of the ddptrain being completed (the command
# word as typed, asked once and remembered), so a new flag completes without a
# change here, and a flag whose help shows its values as a|b|c (--mode=ddp|dp,
# --device=auto|cpu|cuda, --backend=auto|mpi|nccl) completes them. File flags
# complete file names: .npy for --inputs and --targets, .safetensors for
# --init, --save, --resume and --checkpoint, any file for --metrics and --stop-file.
# Both spellings work: --flag=value and --flag value.
#
# ddptrain runs under a launcher (mpirun -np 2 ddptrain --lo<TAB>): the file also
# completes the lines of Open MPI's mpirun, mpiexec and orterun, as ddptrain's from
# the word ddptrain on, and before it as they were completed before (file names when
# nothing was set). bash-completion loads a command's completion when the command is
# first completed, so make install also puts this file where it looks for mpirun's
# and mpiexec's (when no other file is there).

# The --help text of command $1, remembered per command.
_ddptrain_help_cmd=
_ddptrain_help_text=
_ddptrain_help() {
	local cmd=$1
	# shellcheck disable=SC2088 # a literal ~/ as typed on the command line
	case $cmd in "~/"*) cmd=$HOME/${cmd#"~/"} ;; esac
	if [ "$cmd" != "$_ddptrain_help_cmd" ]; then
		_ddptrain_help_cmd=$cmd
		_ddptrain_help_text=$("$cmd" --help 2>/dev/null </dev/null) || true
	fi
}

# Fill _ddptrain_flag_list ("--quiet", "--mode=", ...) and _ddptrain_values
# (flag -> "a b c") from the remembered help text.
_ddptrain_parse() {
	local line re='^[[:space:]]+(--[a-z0-9][a-z0-9-]*)(=([^[:space:]]+))?'
	_ddptrain_flag_list=()
	_ddptrain_values=()
	while IFS= read -r line; do
		[[ $line =~ $re ]] || continue
		if [ -n "${BASH_REMATCH[2]}" ]; then
			_ddptrain_flag_list+=("${BASH_REMATCH[1]}=")
			case ${BASH_REMATCH[3]} in
			*"|"*) _ddptrain_values+=("${BASH_REMATCH[1]} ${BASH_REMATCH[3]//|/ }") ;;
			esac
		else
			_ddptrain_flag_list+=("${BASH_REMATCH[1]}")
		fi
	done <<<"$_ddptrain_help_text"
}

# The flag that $1 names: itself, or the one flag it is a prefix of (ddptrain takes
# unique abbreviations, as getopt_long does); empty when none or several.
_ddptrain_resolve() {
	local f found='' n=0
	for f in "${_ddptrain_flag_list[@]}"; do
		f=${f%=}
		[ "$f" = "$1" ] && { echo "$f"; return; }
		case $f in "$1"*) found=$f; n=$((n + 1)) ;; esac
	done
	if [ "$n" -eq 1 ]; then echo "$found"; fi
}

# Complete the value $2 of flag $1 (or of the flag it abbreviates); every reply gets prefix $3.
_ddptrain_value() {
	local flag value=$2 prefix=$3 entry pattern='' words='' w
	flag=$(_ddptrain_resolve "$1")
	case $flag in
	--inputs | --targets | --val-inputs | --val-targets) pattern='*.npy' ;;
	--init | --save | --resume | --checkpoint | --save-best) pattern='*.safetensors' ;;
	--metrics | --stop-file) pattern='*' ;;
	esac
	if [ -n "$pattern" ]; then
		compopt -o filenames 2>/dev/null || true
		while IFS= read -r w; do
			[ -n "$w" ] && COMPREPLY+=("$prefix$w")
		done < <(compgen -d -- "$value"; compgen -f -X "!$pattern" -- "$value")
		return 0
	fi
	for entry in "${_ddptrain_values[@]}"; do
		[ "${entry%% *}" = "$flag" ] && words=${entry#* }
	done
	for w in $words; do
		case $w in "$value"*) COMPREPLY+=("$prefix$w") ;; esac
	done
}

_ddptrain() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev='' prev2='' f
	[ "$COMP_CWORD" -lt 1 ] || prev=${COMP_WORDS[COMP_CWORD - 1]}
	[ "$COMP_CWORD" -lt 2 ] || prev2=${COMP_WORDS[COMP_CWORD - 2]}
	COMPREPLY=()
	_ddptrain_help "${COMP_WORDS[0]}"
	_ddptrain_parse

	# With '=' in COMP_WORDBREAKS (the default), "--mode=d" arrives as the words
	# "--mode" "=" "d", and "--mode=" as "--mode" "=": the reply replaces only
	# what follows the '='.
	if [ "$cur" = "=" ] && [[ $prev == --* ]]; then
		_ddptrain_value "$prev" "" ""
	elif [ "$prev" = "=" ] && [[ $prev2 == --* ]]; then
		_ddptrain_value "$prev2" "$cur" ""
	elif [[ $cur == --*=* ]]; then
		# '=' is no word break here: the reply is the whole word.
		_ddptrain_value "${cur%%=*}" "${cur#*=}" "${cur%%=*}="
	elif [[ $cur == -* ]]; then
		for f in "${_ddptrain_flag_list[@]}"; do
			case $f in "$cur"*) COMPREPLY+=("$f") ;; esac
		done
		# "--mode=": no space after it, the value comes next.
		if [ ${#COMPREPLY[@]} -eq 1 ] && [[ ${COMPREPLY[0]} == *= ]]; then
			compopt -o nospace 2>/dev/null || true
		fi
	else
		# "--mode d": the value of a flag that takes one.
		f=$(_ddptrain_resolve "$prev")
		case " ${_ddptrain_flag_list[*]} " in
		*" $f= "*) [ -z "$f" ] || _ddptrain_value "$f" "$cur" "" ;;
		esac
	fi
	return 0
}
complete -F _ddptrain ddptrain

# The launchers' completions before this file hooked them: launcher -> function.
declare -gA _ddptrain_launcher_prev
# A launcher's line: from its word ddptrain (any path to it) on, ddptrain's; before it,
# the launcher's own completion, or bash's default (file names).
_ddptrain_launcher() {
	local i prev
	for ((i = 1; i < COMP_CWORD; i++)); do
		if [ "${COMP_WORDS[i]##*/}" = ddptrain ]; then
			COMP_WORDS=("${COMP_WORDS[@]:i}")
			COMP_CWORD=$((COMP_CWORD - i))
			_ddptrain
			return 0
		fi
	done
	COMPREPLY=()
	prev=${_ddptrain_launcher_prev[$1]-}
	if [ -n "$prev" ] && declare -F "$prev" >/dev/null; then
		"$prev" "$@"
	fi
	return 0
}
for _ddptrain_l in mpirun mpiexec orterun; do
	_ddptrain_p=$(complete -p "$_ddptrain_l" 2>/dev/null) || _ddptrain_p=
	case $_ddptrain_p in
	*" -F _ddptrain_launcher "*) ;; # this file, sourced again
	*" -F "*)
		_ddptrain_p=${_ddptrain_p#* -F }
		_ddptrain_launcher_prev[$_ddptrain_l]=${_ddptrain_p%% *}
		;;
	esac
	complete -o bashdefault -o default -F _ddptrain_launcher "$_ddptrain_l"
done
unset _ddptrain_l _ddptrain_p
