#!/usr/bin/env bash
# Fetches the runtime jars of the Apache Kafka broker used by the integration
# harness (integration/harness/kafka.go) with Maven, once, and caches them in
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/kafka-<version>/
# Idempotent: when that directory already holds the jars, it does nothing.
# Prints the jar directory on stdout (Maven's output goes to stderr).
#
# Needs Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/integration/kafka/pom.xml"

# The version is the one pinned in the POM (<kafka.version>).
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
if [[ -z "$version" ]]; then
	echo "kafka-jars: no <kafka.version> in $pom" >&2
	exit 1
fi

cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dest="$cache/kafka-$version"
marker="$dest/.complete"

if [[ -f "$marker" ]] && compgen -G "$dest/kafka_2.13-$version.jar" >/dev/null; then
	echo "$dest"
	exit 0
fi

for tool in java mvn; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "kafka-jars: '$tool' not found (apt-get install openjdk-17-jdk-headless maven)" >&2
		exit 1
	fi
done

mkdir -p "$cache"
# One fetch at a time (parallel test packages may call this together).
exec 9>"$cache/kafka-$version.lock"
flock 9
if [[ -f "$marker" ]]; then
	echo "$dest"
	exit 0
fi

tmp="$(mktemp -d "$cache/kafka-$version.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "kafka-jars: fetching Apache Kafka $version jars into $dest" >&2
mvn -q -B -f "$pom" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$tmp" >&2
if ! compgen -G "$tmp/kafka_2.13-$version.jar" >/dev/null; then
	echo "kafka-jars: kafka_2.13-$version.jar missing after the fetch" >&2
	exit 1
fi
touch "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
