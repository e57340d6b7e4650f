#!/usr/bin/env bash
# Fetches the chart library the HTML report embeds (uPlot, MIT) from the npm registry, checks the
# tarball against the registry's sha512 integrity, and copies its minified build, its CSS and its
# licence into src/view/report/vendor/uplot/. The version and the files' sha256 are in VENDORED.md
# there, and a unit test checks that the embedded files are those.
#   scripts/vendor-uplot.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-1.6.32}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meta=$(curl -fsS "https://registry.npmjs.org/uplot/$version")
tarball=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dist"]["tarball"])' "$meta")
integrity=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dist"]["integrity"])' "$meta")
curl -fsS "$tarball" -o "$work/uplot.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$work/uplot.tgz" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
    echo "vendor-uplot: the tarball's digest $got is not the registry's $integrity" >&2
    exit 1
fi
tar xzf "$work/uplot.tgz" -C "$work"
dest=src/view/report/vendor/uplot
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$work/package/LICENSE" "$dest/"
echo "vendored uPlot $version ($integrity) into $dest; update VENDORED.md and the digests in the test of src/view/report/mod.rs"
(cd "$dest" && sha256sum uPlot.iife.min.js uPlot.min.css LICENSE)
