#!/usr/bin/env bash
# Refresh the vendored htmx scripts in static/vendor/ from the npm registry.
#
#     scripts/vendor_update.sh                 # the pinned versions below
#     HTMX_VERSION=2.0.12 scripts/vendor_update.sh
#
# npm runs in a temporary directory (nothing is added to the project but the copied files).
# Both packages are pinned explicitly: `npm i htmx.org htmx-ext-ws` installs htmx 4 (the
# `latest` tag) beside a nested htmx 2, and htmx-ext-ws 2.x works only with htmx 2.x. The script
# refuses anything but htmx 2.0.x with htmx-ext-ws 2.0.x, checks the version banner inside the
# copied htmx file, and rewrites its own section of static/vendor/README.md (between the
# "htmx:begin" and "htmx:end" markers; other sections are left alone).
set -euo pipefail

HTMX_VERSION="${HTMX_VERSION:-2.0.11}"
HTMX_EXT_WS_VERSION="${HTMX_EXT_WS_VERSION:-2.0.4}"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENDOR="$ROOT/static/vendor"
README="$VENDOR/README.md"

fail() { echo "vendor_update: $*" >&2; exit 1; }

[[ "$HTMX_VERSION" =~ ^2\.0\.[0-9]+$ ]] || fail "HTMX_VERSION must be 2.0.x (htmx-ext-ws 2 needs htmx 2), got $HTMX_VERSION"
[[ "$HTMX_EXT_WS_VERSION" =~ ^2\.0\.[0-9]+$ ]] || fail "HTMX_EXT_WS_VERSION must be 2.0.x, got $HTMX_EXT_WS_VERSION"
command -v npm >/dev/null || fail "npm is not installed (apt-get install npm)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "Fetching htmx.org@$HTMX_VERSION and htmx-ext-ws@$HTMX_EXT_WS_VERSION"
(cd "$WORK" && npm install --no-save --no-package-lock --ignore-scripts --no-audit --no-fund \
    "htmx.org@$HTMX_VERSION" "htmx-ext-ws@$HTMX_EXT_WS_VERSION" >/dev/null)

package_version() { sed -n 's/^  "version": "\(.*\)",$/\1/p' "$WORK/node_modules/$1/package.json"; }
[[ "$(package_version htmx.org)" == "$HTMX_VERSION" ]] || fail "npm installed htmx.org $(package_version htmx.org), not $HTMX_VERSION"
[[ "$(package_version htmx-ext-ws)" == "$HTMX_EXT_WS_VERSION" ]] || fail "npm installed htmx-ext-ws $(package_version htmx-ext-ws), not $HTMX_EXT_WS_VERSION"

HTMX_SRC="$WORK/node_modules/htmx.org/dist/htmx.min.js"
WS_SRC="$WORK/node_modules/htmx-ext-ws/dist/ws.min.js"
grep -q "version:\"$HTMX_VERSION\"" "$HTMX_SRC" || fail "htmx.min.js does not carry the banner version:\"$HTMX_VERSION\""
grep -q 'htmx.defineExtension("ws"' "$WS_SRC" || fail "ws.min.js does not define the htmx 2 \"ws\" extension"

mkdir -p "$VENDOR/htmx" "$VENDOR/htmx-ext-ws"
cp "$HTMX_SRC" "$VENDOR/htmx/htmx.min.js"
cp "$WORK/node_modules/htmx.org/LICENSE" "$VENDOR/htmx/LICENSE"
cp "$WS_SRC" "$VENDOR/htmx-ext-ws/ws.min.js"
cp "$WORK/node_modules/htmx-ext-ws/LICENSE" "$VENDOR/htmx-ext-ws/LICENSE"

sha() { sha256sum "$1" | cut -d' ' -f1; }
SECTION="$WORK/section.md"
cat >"$SECTION" <<EOF
<!-- htmx:begin (written by scripts/vendor_update.sh) -->
## htmx and its websocket extension

| file | package | version | licence | sha256 |
|------|---------|---------|---------|--------|
| \`htmx/htmx.min.js\` | [htmx.org](https://www.npmjs.com/package/htmx.org) | $HTMX_VERSION | 0BSD (\`htmx/LICENSE\`) | \`$(sha "$VENDOR/htmx/htmx.min.js")\` |
| \`htmx-ext-ws/ws.min.js\` | [htmx-ext-ws](https://www.npmjs.com/package/htmx-ext-ws) | $HTMX_EXT_WS_VERSION | 0BSD (\`htmx-ext-ws/LICENSE\`) | \`$(sha "$VENDOR/htmx-ext-ws/ws.min.js")\` |

Update: \`scripts/vendor_update.sh\` (pinned versions at its top; override with
\`HTMX_VERSION=2.0.N HTMX_EXT_WS_VERSION=2.0.N\`). Stay on htmx 2.0.x: htmx-ext-ws 2.x calls
\`htmx.defineExtension\`, which htmx 4 no longer has (htmx 4 ships its own \`hx-ws\` with other
attributes), and a plain \`npm i htmx.org\` now installs htmx 4.
<!-- htmx:end -->
EOF

if [[ ! -f "$README" ]]; then
    printf '# Vendored front-end assets\n\nServed from our own origin (no CDN). Each section names the files, their versions,\nlicences and how to update them.\n' >"$README"
fi
if grep -q '<!-- htmx:begin' "$README"; then
    # Replace the old section in place, keeping everything around it.
    awk -v section="$SECTION" '
        /<!-- htmx:begin/ { while ((getline line < section) > 0) print line; skipping = 1; next }
        /<!-- htmx:end -->/ { skipping = 0; next }
        !skipping { print }
    ' "$README" >"$WORK/README.md"
    cat "$WORK/README.md" >"$README"
else
    { echo; cat "$SECTION"; } >>"$README"
fi

echo "Vendored htmx $HTMX_VERSION and htmx-ext-ws $HTMX_EXT_WS_VERSION into static/vendor/; see static/vendor/README.md"
