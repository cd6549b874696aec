# packaging/spack/package.py - a Spack recipe for ddptrain.
#
# ddptrain has no public release location yet: put this file in a Spack repository
# (spack repo create myrepo && cp package.py myrepo/packages/ddptrain/), then either
# build a checkout in place with `spack dev-build ddptrain@main` (run in the checkout),
# or set DDPTRAIN_GIT to a git URL Spack can clone before `spack install ddptrain`.
#
# tests/packaging.sh checks that every library configure.ac requires is a dependency
# here, so the two lists cannot drift apart.
import os

from spack.package import *


class Ddptrain(AutotoolsPackage):
    """Data-parallel training of MLPs like PyTorch's DistributedDataParallel, in C:
    one MPI rank per replica, gradients all-reduced bucket by bucket during backward;
    OpenBLAS on CPUs, and an optional CUDA module (cuBLAS, NCCL) for GPUs."""

    homepage = os.environ.get("DDPTRAIN_GIT", "https://example.org/ddptrain.git")
    git = os.environ.get("DDPTRAIN_GIT", "https://example.org/ddptrain.git")

    license("MIT")

    version("main", branch="main")

    variant("cuda", default=False, description="Build ddptrain-cuda.so (CUDA, cuBLAS, NCCL)")
    variant("cuda_arch", default="sm_80 sm_90 compute_90",
            description="GPU architectures for nvcc (configure's --with-cuda-arch)")

    depends_on("autoconf", type="build")
    depends_on("automake", type="build")
    depends_on("libtool", type="build")
    depends_on("pkgconfig", type="build")
    # configure requires cmocka (the unit tests) even when they are not run.
    depends_on("cmocka", type="build")

    depends_on("openmpi")
    depends_on("openblas")
    depends_on("jansson@2.10:")
    depends_on("openssl")  # libcrypto: the checkpoint checksum (SHA-256)
    depends_on("cuda", when="+cuda")
    depends_on("nccl", when="+cuda")

    force_autoreconf = True

    def autoreconf(self, spec, prefix):
        autoreconf = which("autoreconf")
        autoreconf("-fi")

    def configure_args(self):
        spec = self.spec
        if spec.satisfies("+cuda"):
            return [
                "--with-cuda=" + spec["cuda"].prefix,
                "--with-nccl=" + spec["nccl"].prefix,
                "--with-cuda-arch=" + spec.variants["cuda_arch"].value,
            ]
        return ["--without-cuda"]

    def setup_run_environment(self, env):
        # Open MPI under a batch system or as root needs nothing from here; the tool
        # finds its CUDA module in $prefix/lib/ddptrain.
        env.prepend_path("MANPATH", self.prefix.share.man)
