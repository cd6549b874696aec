#!/bin/sh
# packaging/spack/release.sh - a ddptrain release for Spack: the tarball `make dist`
# makes, its SHA-256, and a copy of packaging/spack/package.py that names both.
#
#   packaging/spack/release.sh [--tarball FILE] [--url-base URL] OUTDIR
#
# Run in a configured build tree: it runs `make dist` there (or takes --tarball, an
# existing ddptrain-VERSION.tar.xz), copies the tarball into OUTDIR and writes
# OUTDIR/package.py with url = URL/ddptrain-VERSION.tar.xz (URL: --url-base, where the
# tarball will be published; by default file:// OUTDIR) and
# version("VERSION", sha256="..."), the checksum of that very file. A tarball made
# again later has other timestamps and so another checksum: publish this one.
set -eu

usage() {
	echo "usage: $0 [--tarball FILE] [--url-base URL] OUTDIR" >&2
	exit 2
}
tarball=
base=
while [ $# -gt 0 ]; do
	case $1 in
	--tarball) [ $# -ge 2 ] || usage; tarball=$2; shift 2 ;;
	--tarball=*) tarball=${1#*=}; shift ;;
	--url-base) [ $# -ge 2 ] || usage; base=$2; shift 2 ;;
	--url-base=*) base=${1#*=}; shift ;;
	-*) usage ;;
	*) break ;;
	esac
done
[ $# -eq 1 ] || usage
out=$1
here=$(cd "$(dirname "$0")" && pwd)
recipe=$here/package.py

if [ -z "$tarball" ]; then
	[ -f Makefile ] || { echo "$0: no Makefile here: run it in a configured build tree, or give --tarball" >&2; exit 1; }
	make dist >&2
	tarball=$(ls -t ddptrain-*.tar.xz | head -n 1)
fi
[ -f "$tarball" ] || { echo "$0: --tarball: $tarball: no such file" >&2; exit 1; }
name=$(basename "$tarball")
case $name in
ddptrain-*.tar.xz | ddptrain-*.tar.gz) ;;
*) echo "$0: $tarball: not a ddptrain-VERSION.tar.xz (or .tar.gz)" >&2; exit 1 ;;
esac
version=${name#ddptrain-}
version=${version%.tar.?z}
case $version in
'' | *[!0-9A-Za-z.+-]*) echo "$0: $tarball: '$version' is not a version" >&2; exit 1 ;;
esac

mkdir -p "$out"
out=$(cd "$out" && pwd)
[ "$(cd "$(dirname "$tarball")" && pwd)/$name" = "$out/$name" ] || cp "$tarball" "$out/$name"
sum=$(sha256sum "$out/$name" | cut -d' ' -f1)
[ -n "$base" ] || base=file://$out
base=${base%/}
case $base in *'|'* | *'&'* | *'\'* | *'"'*) echo "$0: --url-base: '$base' has a character a URL here may not" >&2; exit 2 ;; esac

grep -q '^    # @RELEASE@' "$recipe" || { echo "$0: $recipe has no @RELEASE@ line" >&2; exit 1; }
sed -e "s|^    # @RELEASE@.*|    url = \"$base/$name\"\\
    version(\"$version\", sha256=\"$sum\")|" "$recipe" >"$out/package.py.tmp"
mv "$out/package.py.tmp" "$out/package.py"
echo "$out/package.py: ddptrain $version, $base/$name, sha256 $sum"
