#!/usr/bin/env bash
# Prepare the stock Genesys AudioHook reference client (purecloudlabs/audiohook-reference-implementation)
# at a pinned commit, with its npm dependencies, under the repo's var/ (gitignored, kept between runs).
#
#   tests/acceptance/audiohook_reference/setup.sh      -> prints the prepared directory on its last line
#
# Exit 0: ready. Exit 3: the source or the npm registry cannot be reached (the acceptance test skips
# and says so). Anything else: a real failure.
#
# Source: upstream/ beside this script, the pinned commit's client/, app/audiohook/ and LICENSE (MIT)
# as `git archive` gave them (CI machines do not reach GitHub); AUDIOHOOK_REFERENCE_GIT (a git URL
# or a local clone) takes them from git instead. Only what the client needs is taken from the commit: client/ (the sample client, whose WebSocket
# factory and tone source we use) and app/audiohook/ (the protocol library with createClientSession;
# it needs nothing but `uuid` from npm, which client/'s dependencies hold, so app/'s own lockfile,
# the sample *server* with the AWS SDK, is not installed: app/node_modules links to client's).
# The lockfile points at Genesys' internal npm mirror: its `resolved` URLs are rewritten to the
# public registry (same tarballs, the integrity hashes still check them), then `npm ci`.
set -euo pipefail

COMMIT=2871b01cb07812de8d1b32f46d8142e282ad6928  # master of 2026-01-01 ("update license")
SOURCE=${AUDIOHOOK_REFERENCE_GIT:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=$ROOT/var/audiohook-reference/$COMMIT
REGISTRY=https://registry.npmjs.org/

unreachable() { echo "UNREACHABLE: $*" >&2; exit 3; }

for tool in git node npm; do
    command -v "$tool" >/dev/null || unreachable "$tool is not installed"
done

if [ ! -f "$DEST/.source-ok" ]; then
    rm -rf "$DEST" && mkdir -p "$DEST"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    if [ -z "$SOURCE" ]; then
        cp -r "$HERE/upstream/client" "$HERE/upstream/LICENSE" "$DEST/"
        mkdir -p "$DEST/app" && cp -r "$HERE/upstream/app/audiohook" "$DEST/app/"
    else
        git init -q "$work/repo"
        if ! git -C "$work/repo" fetch -q --depth 1 "$SOURCE" "$COMMIT" 2>"$work/fetch.err"; then
            unreachable "cannot fetch $COMMIT from $SOURCE: $(tail -1 "$work/fetch.err")"
        fi
        git -C "$work/repo" archive "$COMMIT" client app/audiohook | tar -x -C "$DEST"
    fi
    touch "$DEST/.source-ok"
fi

cp "$HERE/run.ts" "$DEST/client/src/ours-run.ts"  # ours, beside the client's own sources it imports
ln -sfn ../client/node_modules "$DEST/app/node_modules"

lock=$DEST/client/package-lock.json
node -e '
const fs = require("fs");
const [file, registry] = process.argv.slice(1);
const text = fs.readFileSync(file, "utf8");
// ".../any/mirror/path/<@scope/>name/-/name-1.2.3.tgz" -> "<registry><@scope/>name/-/name-1.2.3.tgz"
const out = text.replace(/"resolved": "https?:\/\/[^"]*?\/((?:@[^\/"]+\/)?[^\/"]+\/-\/[^\/"]+\.tgz)"/g,
                         (_, tail) => `"resolved": "${registry}${tail}"`);
fs.writeFileSync(file, out);
' "$lock" "$REGISTRY"

stamp=$(sha256sum "$lock" | cut -c1-16)
if [ ! -f "$DEST/client/node_modules/.ours-$stamp" ]; then
    if ! npm ping --registry "$REGISTRY" >/dev/null 2>&1; then
        unreachable "the npm registry $REGISTRY does not answer"
    fi
    (cd "$DEST/client" && npm ci --no-audit --no-fund --registry "$REGISTRY" >"$DEST/npm-ci.log" 2>&1) \
        || { tail -20 "$DEST/npm-ci.log" >&2; exit 1; }
    touch "$DEST/client/node_modules/.ours-$stamp"
fi
echo "$DEST"
