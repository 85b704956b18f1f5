#!/usr/bin/env bash
# Fetches the dashboard's chart library (uPlot) from the npm registry into
# dashboard/web/vendor, where go:embed takes it into the binary. The files
# are committed, so building needs neither npm nor a network; run this only
# to change the library's version.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${UPLOT_VERSION:-1.6.32}"
dest=dashboard/web/vendor
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

command -v npm >/dev/null 2>&1 || { echo "vendor-ui.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
(cd "$tmp" && npm pack --silent "uplot@$VERSION" >/dev/null)
tar -xzf "$tmp"/uplot-"$VERSION".tgz -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.iife.min.js" "$dest/uPlot.iife.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$tmp/package/LICENSE" "$dest/uPlot.LICENSE"
echo "uplot $VERSION" > "$dest/VERSION"
sha256sum "$dest"/uPlot.iife.min.js "$dest"/uPlot.min.css | sed "s#$dest/##" >> "$dest/VERSION"
echo "vendor-ui.sh: uPlot $VERSION in $dest"
