#!/usr/bin/env bash
# Refresh the vendored graph-layout scripts of the run page in static/vendor/ from the npm registry:
# Cytoscape.js, the cytoscape-dagre layout and dagre (whose bundle includes graphlib and lodash).
#
#     scripts/vendor_graph_update.sh                      # the pinned versions below
#     CYTOSCAPE_VERSION=3.34.5 scripts/vendor_graph_update.sh
#
# npm runs in a temporary directory (nothing is added to the project but the copied files). The
# script checks what npm installed against the pins, copies each package's browser build and its
# licence, and rewrites its own section of static/vendor/README.md (between the "graph:begin"
# and "graph:end" markers; other sections are left alone).
#
# cytoscape-dagre 2.x is written against dagre 0.8 (the `dagre` package, not `@dagrejs/dagre`);
# its browser build reads the `dagre` global, so dagre's full bundle (dist/dagre.min.js, with
# graphlib and lodash inside) is what the page loads before it.
set -euo pipefail

CYTOSCAPE_VERSION="${CYTOSCAPE_VERSION:-3.34.4}"
CYTOSCAPE_DAGRE_VERSION="${CYTOSCAPE_DAGRE_VERSION:-2.5.0}"
DAGRE_VERSION="${DAGRE_VERSION:-0.8.5}"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENDOR="$ROOT/static/vendor"
README="$VENDOR/README.md"

fail() { echo "vendor_graph_update: $*" >&2; exit 1; }

[[ "$CYTOSCAPE_VERSION" =~ ^3\.[0-9]+\.[0-9]+$ ]] || fail "CYTOSCAPE_VERSION must be 3.x, got $CYTOSCAPE_VERSION"
[[ "$CYTOSCAPE_DAGRE_VERSION" =~ ^2\.[0-9]+\.[0-9]+$ ]] || fail "CYTOSCAPE_DAGRE_VERSION must be 2.x, got $CYTOSCAPE_DAGRE_VERSION"
[[ "$DAGRE_VERSION" =~ ^0\.8\.[0-9]+$ ]] || fail "DAGRE_VERSION must be 0.8.x (what cytoscape-dagre 2 expects), got $DAGRE_VERSION"
command -v npm >/dev/null || fail "npm is not installed (apt-get install npm)"
command -v sha256sum >/dev/null || fail "sha256sum is not installed"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "Fetching cytoscape@$CYTOSCAPE_VERSION, cytoscape-dagre@$CYTOSCAPE_DAGRE_VERSION and dagre@$DAGRE_VERSION"
(cd "$WORK" && npm install --no-save --no-package-lock --ignore-scripts --no-audit --no-fund \
    "cytoscape@$CYTOSCAPE_VERSION" "cytoscape-dagre@$CYTOSCAPE_DAGRE_VERSION" "dagre@$DAGRE_VERSION" >/dev/null)

MODULES="$WORK/node_modules"
package_field() { node -e "console.log(require('$MODULES/$1/package.json').$2)"; }
for pair in "cytoscape:$CYTOSCAPE_VERSION" "cytoscape-dagre:$CYTOSCAPE_DAGRE_VERSION" "dagre:$DAGRE_VERSION"; do
    name="${pair%%:*}"; want="${pair#*:}"
    got="$(package_field "$name" version)"
    [[ "$got" == "$want" ]] || fail "npm installed $name $got, not $want"
done
# The nested dagre cytoscape-dagre resolves must be the one we vendor.
if [[ -d "$MODULES/cytoscape-dagre/node_modules/dagre" ]]; then
    fail "cytoscape-dagre@$CYTOSCAPE_DAGRE_VERSION wants another dagre than $DAGRE_VERSION: pick matching versions"
fi

copy() {  # copy SOURCE DEST_DIR
    mkdir -p "$2"
    cp "$1" "$2/"
}
copy "$MODULES/cytoscape/dist/cytoscape.min.js" "$VENDOR/cytoscape"
copy "$MODULES/cytoscape/LICENSE" "$VENDOR/cytoscape"
copy "$MODULES/cytoscape-dagre/cytoscape-dagre.js" "$VENDOR/cytoscape-dagre"
copy "$MODULES/cytoscape-dagre/LICENSE" "$VENDOR/cytoscape-dagre"
copy "$MODULES/dagre/dist/dagre.min.js" "$VENDOR/dagre"
copy "$MODULES/dagre/LICENSE" "$VENDOR/dagre"
cp "$MODULES/graphlib/LICENSE" "$VENDOR/dagre/LICENSE.graphlib"
cp "$MODULES/lodash/LICENSE" "$VENDOR/dagre/LICENSE.lodash"

sum() { sha256sum "$VENDOR/$1" | cut -d' ' -f1; }
GRAPHLIB_VERSION="$(package_field graphlib version)"
SECTION="$WORK/section.md"
cat > "$SECTION" <<EOF
<!-- graph:begin (written by scripts/vendor_graph_update.sh) -->
## Cytoscape.js and the dagre layout (the run page's DAG)

| file | package | version | licence | sha256 |
|------|---------|---------|---------|--------|
| \`cytoscape/cytoscape.min.js\` | [cytoscape](https://www.npmjs.com/package/cytoscape) | $CYTOSCAPE_VERSION | $(package_field cytoscape license) (\`cytoscape/LICENSE\`) | \`$(sum cytoscape/cytoscape.min.js)\` |
| \`cytoscape-dagre/cytoscape-dagre.js\` | [cytoscape-dagre](https://www.npmjs.com/package/cytoscape-dagre) | $CYTOSCAPE_DAGRE_VERSION | $(package_field cytoscape-dagre license) (\`cytoscape-dagre/LICENSE\`) | \`$(sum cytoscape-dagre/cytoscape-dagre.js)\` |
| \`dagre/dagre.min.js\` | [dagre](https://www.npmjs.com/package/dagre) | $DAGRE_VERSION | $(package_field dagre license) (\`dagre/LICENSE\`); bundles graphlib $GRAPHLIB_VERSION (MIT, \`dagre/LICENSE.graphlib\`) and lodash modules (MIT, \`dagre/LICENSE.lodash\`) | \`$(sum dagre/dagre.min.js)\` |

The run page loads them in this order (deferred): \`cytoscape.min.js\`, \`dagre.min.js\`,
\`cytoscape-dagre.js\` (which registers the \`dagre\` layout with the \`cytoscape\` global), then
the ES module \`dashboard/run/main.js\` (it reads those globals). Cytoscape would inject a one-rule \`<style>\` element (blocked by the CSP);
the page's stylesheet link carries the id Cytoscape looks for, so it does not, and \`run.css\`
holds the rule.

Update: \`scripts/vendor_graph_update.sh\` (pinned versions at its top; override with
\`CYTOSCAPE_VERSION=3.N.N CYTOSCAPE_DAGRE_VERSION=2.N.N DAGRE_VERSION=0.8.N\`). Stay on dagre 0.8
with cytoscape-dagre 2 (it reads the \`dagre\` global of that bundle), then run
\`pytest tests/browser/test_run_page.py\`: it draws real plans and counts the edges.
<!-- graph:end -->
EOF

if grep -q '<!-- graph:begin' "$README"; then
    python3 - "$README" "$SECTION" <<'PY'
import re, sys
readme, section = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
text = open(readme).read()
text = re.sub(r"<!-- graph:begin.*?<!-- graph:end -->", lambda m: section, text, flags=re.S)
open(readme, "w").write(text)
PY
else
    printf '\n%s\n' "$(cat "$SECTION")" >> "$README"
fi
echo "Updated static/vendor/{cytoscape,cytoscape-dagre,dagre} and their section of static/vendor/README.md"
