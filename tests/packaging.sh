#!/bin/bash
# Packaging: --version names the build and the licence; LICENSE is there; make install
# puts the scripts the man page's SEE ALSO names where the page says; the Dockerfiles
# build by the README's commands; the Spack recipe lists every library configure needs.
. "$(dirname "$0")/lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}

"$DDPTRAIN" --version >"$TMPD/v" || fail "--version exited $?"
grep -q '^License: MIT ' "$TMPD/v" || fail "--version names no licence: $(cat "$TMPD/v")"
grep -q '^built with: Open MPI [0-9]' "$TMPD/v" || fail "--version names no MPI: $(cat "$TMPD/v")"
grep -q '^backends: cpu' "$TMPD/v" || fail "--version names no backends"
head -n 1 "$TOP_SRCDIR/LICENSE" | grep -qx 'MIT License' || fail "LICENSE is not the MIT licence"
# Without an MPI runtime: OPAL_PREFIX pointing nowhere makes MPI_Init fail (Open MPI finds
# none of its components), so this passes only if --version never starts MPI.
OPAL_PREFIX=/nonexistent PATH=/usr/bin:/bin "$DDPTRAIN" --version >"$TMPD/v2" 2>&1 ||
	fail "--version with no MPI runtime: exit $?: $(cat "$TMPD/v2")"
cmp -s "$TMPD/v" "$TMPD/v2" || fail "--version with no MPI runtime printed: $(cat "$TMPD/v2")"

# make install's data half into a staging directory (install-data builds nothing, so
# it cannot relink a binary other tests are running).
top=$(cd "$TESTS_BUILDDIR/.." && pwd)
make -s -C "$top" install-data DESTDIR="$TMPD/inst" >"$TMPD/install.log" 2>&1 ||
	fail "make install-data: $(tail -5 "$TMPD/install.log")"
man=$(find "$TMPD/inst" -name ddptrain.1)
[ -n "$man" ] || fail "no man page installed"
dir=$(sed -n 's/^\.IR \(.*\)\/scripts :$/\1/p' "$man")
[ -n "$dir" ] || fail "the man page does not say where the scripts are installed"
for s in $(sed -n '/^Installed with ddptrain in/,/^In the source tree only/p' "$man" |
	sed -n 's/^\.BR\{0,1\} \([a-z/\\.-]*\).*/\1/p' | tr -d '\\' | grep -v -- '^--'); do
	[ -x "$TMPD/inst$dir/scripts/$s" ] || fail "SEE ALSO names $s, not installed in $dir/scripts"
	n=$((${n:-0} + 1))
done
[ "${n:-0}" -ge 7 ] || fail "found only ${n:-0} scripts in SEE ALSO"
[ -f "$(find "$TMPD/inst" -path '*doc/ddptrain/LICENSE')" ] || fail "LICENSE not installed"

# The Dockerfiles' build steps are the README's commands.
for f in Dockerfile Dockerfile.cuda; do
	grep -q '^RUN scripts/install-deps.sh && autoreconf -fi && ./configure' "$TOP_SRCDIR/packaging/$f" ||
		fail "packaging/$f does not build by the README's commands"
done
readme=$(sed -n 's/^RUN //p' "$TOP_SRCDIR/packaging/Dockerfile" | head -n 1)
grep -qxF -- "$readme" "$TOP_SRCDIR/README.md" || fail "packaging/Dockerfile's '$readme' is not a README command"
grep -q '^FROM debian:12$' "$TOP_SRCDIR/packaging/Dockerfile" || fail "Dockerfile is not Debian 12"
grep -q '^FROM nvidia/cuda:' "$TOP_SRCDIR/packaging/Dockerfile.cuda" || fail "Dockerfile.cuda is not on NVIDIA's CUDA image"

# run-dockerfile.sh (CI's stand-in for docker build) runs every ENV and RUN step in order,
# even when a step reads standard input, and stops at a failing one.
printf 'FROM debian:12\nENV A=1 B=two\nRUN cat; echo "$A$B" >%s/d1\nRUN echo \\\n  ok >>%s/d1\nCMD ["x"]\n' \
	"$TMPD" "$TMPD" >"$TMPD/Dockerfile"
(cd "$TMPD" && bash "$TOP_SRCDIR/packaging/run-dockerfile.sh" Dockerfile) >"$TMPD/rd.out" 2>&1 ||
	fail "run-dockerfile.sh: $(cat "$TMPD/rd.out")"
[ "$(cat "$TMPD/d1")" = "$(printf '1two\nok')" ] || fail "run-dockerfile.sh ran: $(cat "$TMPD/d1")"
grep -q ': 2 RUN steps passed' "$TMPD/rd.out" || fail "run-dockerfile.sh: $(cat "$TMPD/rd.out")"
printf 'RUN false\nRUN touch %s/never\n' "$TMPD" >"$TMPD/Dockerfile.bad"
bash "$TOP_SRCDIR/packaging/run-dockerfile.sh" "$TMPD/Dockerfile.bad" >/dev/null 2>&1 && fail "a failing step passed"
[ ! -e "$TMPD/never" ] || fail "run-dockerfile.sh went on after a failing step"

# The Spack recipe: valid Python, and a dependency for each library configure requires.
if command -v "$PY" >/dev/null; then
	"$PY" - "$TOP_SRCDIR" <<'PYEOF' || fail "packaging/spack/package.py"
import ast, re, sys
top = sys.argv[1]
tree = ast.parse(open(f"{top}/packaging/spack/package.py").read())
deps = {c.args[0].value.split("@")[0] for c in ast.walk(tree)
        if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "depends_on"}
conf = open(f"{top}/configure.ac").read()
mods = set(re.findall(r"PKG_CHECK_MODULES\(\[\w+\], \[([\w-]+)", conf))
spack_name = {"ompi-c": "openmpi", "openblas": "openblas", "jansson": "jansson",
              "libcrypto": "openssl", "cmocka": "cmocka"}
missing = [m for m in mods if spack_name.get(m, m) not in deps]
assert not missing, f"configure needs {missing}, the recipe lacks them"
assert {"cuda", "nccl"} <= deps, deps
print(f"spack recipe: {len(deps)} dependencies cover configure's {sorted(mods)}")
PYEOF
fi
echo "packaging: --version, LICENSE, install of $n scripts, Dockerfiles and Spack recipe consistent"
