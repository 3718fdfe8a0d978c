#!/usr/bin/env bash
# Builds the Confluent-compatible schema registry used by the integration
# harness (integration/harness/registry.go): Apicurio Registry 2.x with
# in-memory storage, assembled by Maven from the POM in integration/registry/
# (a Quarkus build of the published app jar), once, and caches it in
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/registry-<version>/
# Idempotent: when that directory already holds the build, it does nothing.
# Prints the path of the runnable jar (quarkus-app/quarkus-run.jar) on stdout
# (Maven's output goes to stderr).
#
# Needs Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/integration/registry/pom.xml"

# The version is the one pinned in the POM (<apicurio.version>).
version="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$pom" | head -n1)"
if [[ -z "$version" ]]; then
	echo "registry-build: no <apicurio.version> in $pom" >&2
	exit 1
fi

cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dest="$cache/registry-$version"
jar="$dest/quarkus-app/quarkus-run.jar"
marker="$dest/.complete"

if [[ -f "$marker" && -f "$jar" ]]; then
	echo "$jar"
	exit 0
fi

for tool in java mvn; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "registry-build: '$tool' not found (apt-get install openjdk-17-jdk-headless maven)" >&2
		exit 1
	fi
done

mkdir -p "$cache"
# One build at a time (parallel test packages may call this together).
exec 9>"$cache/registry-$version.lock"
flock 9
if [[ -f "$marker" && -f "$jar" ]]; then
	echo "$jar"
	exit 0
fi

tmp="$(mktemp -d "$cache/registry-$version.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "registry-build: building Apicurio Registry $version into $dest" >&2
# quarkus.package.type is given here because the app's own properties
# (%prod.quarkus.package.type=legacy-jar) outrank POM properties.
mvn -q -B -f "$pom" package -Dregistry.build.dir="$tmp/target" \
	-Dquarkus.package.type=fast-jar >&2
if [[ ! -f "$tmp/target/quarkus-app/quarkus-run.jar" ]]; then
	echo "registry-build: quarkus-app/quarkus-run.jar missing after the build" >&2
	exit 1
fi
# Keep only the runnable application (it refers to its lib/ by relative paths).
mv "$tmp/target/quarkus-app" "$tmp/quarkus-app"
rm -rf "$tmp/target"
touch "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$jar"
