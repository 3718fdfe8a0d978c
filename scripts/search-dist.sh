#!/usr/bin/env bash
# Fetches the OpenSearch and Elasticsearch server distributions used by the
# integration harness (integration/harness/search.go) with Maven, once, and
# caches them in
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/search/opensearch-<version>.zip
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/search/elasticsearch-<version>.zip
# Idempotent: when both zips are there, it does nothing.
# Prints the directory holding them on stdout (Maven's output goes to stderr).
#
# Needs Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/integration/search/pom.xml"

# The versions are the ones pinned in the POM.
prop() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$pom" | head -n1; }
os_version="$(prop opensearch.version)"
es_version="$(prop elasticsearch.version)"
if [[ -z "$os_version" || -z "$es_version" ]]; then
	echo "search-dist: no <opensearch.version> or <elasticsearch.version> in $pom" >&2
	exit 1
fi

cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dest="$cache/search"
zips=("opensearch-$os_version.zip" "elasticsearch-$es_version.zip")

complete() {
	local z
	for z in "${zips[@]}"; do
		[[ -s "$dest/$z" ]] || return 1
	done
}

if complete; then
	echo "$dest"
	exit 0
fi

for tool in java mvn; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "search-dist: '$tool' not found (apt-get install openjdk-17-jdk-headless maven)" >&2
		exit 1
	fi
done

mkdir -p "$cache"
# One fetch at a time (parallel test packages may call this together).
exec 9>"$cache/search.lock"
flock 9
if complete; then
	echo "$dest"
	exit 0
fi

tmp="$(mktemp -d "$cache/search.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "search-dist: fetching OpenSearch $os_version and Elasticsearch $es_version into $dest" >&2
mvn -q -B -f "$pom" dependency:copy-dependencies \
	-DincludeTypes=zip -DexcludeTransitive=true -DoutputDirectory="$tmp" >&2
mkdir -p "$dest"
for z in "${zips[@]}"; do
	if [[ ! -s "$tmp/$z" ]]; then
		echo "search-dist: $z missing after the fetch" >&2
		exit 1
	fi
	# A rename within one file system: a reader never sees a partial zip.
	mv "$tmp/$z" "$dest/$z"
done
echo "$dest"
