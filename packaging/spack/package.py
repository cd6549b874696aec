# packaging/spack/package.py - a Spack recipe for ddptrain.
#
# ddptrain has no public download location yet, so this recipe names no URL and no
# version of its own: a release is the tarball `make dist` makes, and
# packaging/spack/release.sh makes one, checksums it and writes a copy of this recipe
# with its url and version("X.Y.Z", sha256=...) lines, the checksum of that very file:
#
#   packaging/spack/release.sh [--url-base URL] OUTDIR   # in a configured build tree
#
# (the url is file://OUTDIR/ddptrain-X.Y.Z.tar.xz, or URL/... where it will be
# published), then put OUTDIR/package.py in a Spack package repository as
# packages/ddptrain/package.py (spack repo create; spack repo add) and
# `spack install ddptrain` or `spack install ddptrain+cuda cuda_arch=90`.
#
# tests/cluster/packaging.sh checks that every library configure.ac requires is a dependency
# here, and release.sh's output.
from spack.package import *

try:  # Spack 1.x: the build systems live in the builtin package repository
    from spack_repo.builtin.build_systems.autotools import AutotoolsPackage
    from spack_repo.builtin.build_systems.cuda import CudaPackage
except ImportError:  # Spack 0.x: spack.package exports them
    pass


class Ddptrain(AutotoolsPackage, CudaPackage):
    """Data-parallel training of MLPs like PyTorch's DistributedDataParallel, in C:
    one MPI rank per replica, gradients all-reduced bucket by bucket during backward;
    OpenBLAS on CPUs, and an optional CUDA module (cuBLAS, NCCL) for GPUs."""

    license("MIT")

    # @RELEASE@ release.sh puts the url and version() lines here

    # CudaPackage gives the cuda variant, cuda_arch (none: configure's own default,
    # sm_80 sm_90 compute_90) and depends_on("cuda", when="+cuda").
    depends_on("c", type="build")
    depends_on("cxx", type="build", when="+cuda")  # nvcc's host compiler

    depends_on("autoconf", type="build")
    depends_on("automake", type="build")
    depends_on("libtool", type="build")
    depends_on("pkgconfig", type="build")
    # configure requires cmocka (the unit tests) even when they are not run.
    depends_on("cmocka", type="build")

    depends_on("mpi")
    depends_on("openblas")
    depends_on("jansson@2.10:")
    depends_on("openssl")  # libcrypto: the checkpoint checksum (SHA-256)
    depends_on("nccl", when="+cuda")

    force_autoreconf = True

    def autoreconf(self, spec, prefix):
        autoreconf = which("autoreconf")
        autoreconf("-fi")

    def configure_args(self):
        spec = self.spec
        # configure asks pkg-config for Open MPI's ompi-c, then the wrapper; compiling
        # with the MPI provider's wrapper works for any of them.
        args = ["CC=" + spec["mpi"].mpicc, "MPICC=" + spec["mpi"].mpicc]
        if not spec.satisfies("+cuda"):
            return args + ["--without-cuda"]
        args += ["--with-cuda=" + spec["cuda"].prefix, "--with-nccl=" + spec["nccl"].prefix]
        archs = [a for a in spec.variants["cuda_arch"].value if a != "none"]
        if archs:
            # Machine code for each, and PTX of the newest for GPUs after it.
            newest = max(archs, key=lambda a: int("".join(c for c in a if c.isdigit())))
            args.append("--with-cuda-arch=" + " ".join(["sm_" + a for a in archs] + ["compute_" + newest]))
        return args

    def setup_run_environment(self, env):
        # The tool finds its CUDA module in $prefix/lib/ddptrain by itself.
        env.prepend_path("MANPATH", self.prefix.share.man)
