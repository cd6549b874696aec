#!/bin/bash
# Packaging: --version names the build and the licence; LICENSE is there; make install
# puts the scripts the man page's SEE ALSO names where the page says; the Dockerfiles
# build by the README's commands; the Spack recipe lists every library configure needs.
. "$(dirname "$0")/../lib/setup.sh"
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
# The bash completion, and mpirun's and mpiexec's names for it (bash-completion loads a
# launcher's completion by its name: mpirun -np 2 ddptrain --lo<TAB>).
comp=$(find "$TMPD/inst" -path '*/bash-completion/completions/ddptrain')
[ -f "$comp" ] || fail "no bash completion installed"
for l in mpirun mpiexec; do
	[ "$(readlink "${comp%/*}/$l")" = ddptrain ] || fail "completions/$l is not a link to ddptrain's"
done

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

# The Spack recipe: valid Python; a dependency for each library configure requires, MPI
# as the virtual mpi; c (and for nvcc cxx) as build dependencies; CudaPackage's cuda and
# cuda_arch variants, not its own; no URL or checksum of its own: release.sh writes them
# for a real tarball. Its configure_args, run against stand-ins for Spack's classes.
if command -v "$PY" >/dev/null; then
	printf 'not really a tarball\n' >"$TMPD/ddptrain-9.8.7.tar.xz"
	sh "$TOP_SRCDIR/packaging/spack/release.sh" --tarball "$TMPD/ddptrain-9.8.7.tar.xz" --url-base https://releases.invalid/ddptrain \
		"$TMPD/rel" >"$TMPD/rel.out" 2>&1 || fail "packaging/spack/release.sh: $(cat "$TMPD/rel.out")"
	"$PY" - "$TOP_SRCDIR" "$TMPD/rel/package.py" "$(sha256sum "$TMPD/ddptrain-9.8.7.tar.xz" | cut -d' ' -f1)" <<'PYEOF' || fail "packaging/spack/package.py"
import ast, re, sys, types
top, released, sha = sys.argv[1:4]
text = open(f"{top}/packaging/spack/package.py").read()
tree = ast.parse(text)
calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]
deps = {c.args[0].value.split("@")[0] for c in calls if c.func.id == "depends_on"}
conf = open(f"{top}/configure.ac").read()
mods = set(re.findall(r"PKG_CHECK_MODULES\(\[\w+\], \[([\w-]+)", conf))
spack_name = {"ompi-c": "mpi", "openblas": "openblas", "jansson": "jansson",
              "libcrypto": "openssl", "cmocka": "cmocka"}
missing = [m for m in mods if spack_name.get(m, m) not in deps]
assert not missing, f"configure needs {missing}, the recipe lacks them"
assert "openmpi" not in deps, "the recipe depends on openmpi, not the virtual mpi"
assert "nccl" in deps, deps
build = {c.args[0].value for c in calls if c.func.id == "depends_on"
         and any(k.arg == "type" and getattr(k.value, "value", None) == "build" for k in c.keywords)}
assert {"c", "cxx"} <= build, f"c and cxx are not build dependencies: {sorted(build)}"
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
bases = [b.id for b in cls.bases]
assert bases == ["AutotoolsPackage", "CudaPackage"], bases
own = [c.args[0].value for c in calls if c.func.id == "variant"]
assert not own, f"the recipe declares variants {own}: CudaPackage's cuda and cuda_arch are the ones"
assert not re.search(r"https?://|sha256=\"", text), "the recipe names a URL or a checksum of its own"
assert not any(c.func.id == "version" for c in calls), "the recipe names a version of its own"

# release.sh's copy: the url and the version with the tarball's own checksum, and
# otherwise the recipe.
rel = open(released).read()
assert "@RELEASE@" not in rel
want = (f'    url = "https://releases.invalid/ddptrain/ddptrain-9.8.7.tar.xz"\n'
        f'    version("9.8.7", sha256="{sha}")\n')
assert want in rel, rel
assert rel.replace(want, "") == re.sub(r"    # @RELEASE@.*\n", "", text)

# Run it: stand-ins for spack.package's directives and classes, and a spec.
directives = []
pkg = types.ModuleType("spack.package")
for name in ("license", "version", "depends_on", "variant", "conflicts"):
    setattr(pkg, name, lambda *a, _n=name, **k: directives.append((_n, a, k)))
pkg.AutotoolsPackage = type("AutotoolsPackage", (), {})
pkg.CudaPackage = type("CudaPackage", (), {})
pkg.which = lambda name: None
pkg.__all__ = [n for n in vars(pkg) if not n.startswith("_")]
sys.modules["spack"] = types.ModuleType("spack")
sys.modules["spack.package"] = pkg
ns = {}
exec(compile(rel, released, "exec"), ns)
assert ("version", ("9.8.7",), {"sha256": sha}) in directives

class Spec:
    def __init__(self, cuda, archs):
        self.cuda, self.variants = cuda, {"cuda_arch": types.SimpleNamespace(value=archs)}
    def satisfies(self, s):
        return self.cuda if s == "+cuda" else False
    def __getitem__(self, name):
        return types.SimpleNamespace(prefix=f"/opt/{name}", mpicc=f"/opt/{name}/bin/mpicc")

def args(cuda, archs=("none",)):
    p = ns["Ddptrain"].__new__(ns["Ddptrain"])
    p.spec = Spec(cuda, archs)
    return p.configure_args()

mpi = ["CC=/opt/mpi/bin/mpicc", "MPICC=/opt/mpi/bin/mpicc"]
assert args(False) == mpi + ["--without-cuda"], args(False)
assert args(True) == mpi + ["--with-cuda=/opt/cuda", "--with-nccl=/opt/nccl"], args(True)
got = args(True, ("80", "100", "90a"))
assert got[-1] == "--with-cuda-arch=sm_80 sm_100 sm_90a compute_100", got
print(f"spack recipe: {len(deps)} dependencies cover configure's {sorted(mods)}, mpi virtual, "
      f"CudaPackage's cuda_arch -> {got[-1]}; release.sh: url and sha256 of the tarball")
PYEOF
	sh "$TOP_SRCDIR/packaging/spack/release.sh" --tarball "$TMPD/rel.out" "$TMPD/rel2" >/dev/null 2>&1 &&
		fail "release.sh took a tarball not named ddptrain-VERSION.tar.gz"
fi
echo "packaging: --version, LICENSE, install of $n scripts and the completion, Dockerfiles and Spack recipe consistent"
