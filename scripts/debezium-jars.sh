#!/usr/bin/env bash
# Builds the Debezium peer of the benchmark harness (bench/debezium: a small
# main around the Debezium embedded engine, run by bench/debezium.go) with
# Maven and caches its jar and its runtime dependencies, once per connector,
# in ${SLUICE_CACHE:-$HOME/.cache/sluice}/:
#
#   postgres  debezium-<debezium.version>/           (the POM's default profile)
#   mariadb   debezium-mariadb-<debezium.mariadb.version>/
#
# (the POM says why MariaDB runs on another Debezium release).
#
# Usage: scripts/debezium-jars.sh [postgres|mariadb|all]   (default all)
# Idempotent: a directory holding a build of the current sources (its
# .complete marker records their checksum) is kept; when the sources
# changed, it is rebuilt. Prints each jar directory on its own line on stdout
# (Maven's output goes to stderr).
#
# Needs Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
project="$root/bench/debezium"
pom="$project/pom.xml"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"

which="${1:-all}"
case "$which" in
postgres | mariadb) connectors=("$which") ;;
all) connectors=(postgres mariadb) ;;
*)
	echo "usage: $0 [postgres|mariadb|all]" >&2
	exit 2
	;;
esac

# property NAME: the value of <NAME> in the POM.
property() {
	sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$pom" | head -n1
}

# The checksum of what is built: the POM and the Java sources.
sum="$( (cd "$project" && find pom.xml src -type f -print | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1)"

# build CONNECTOR: makes sure its jar directory is complete; prints it.
build() {
	local connector="$1" version dest
	case "$connector" in
	postgres)
		version="$(property debezium.version)"
		dest="$cache/debezium-$version"
		;;
	mariadb)
		version="$(property debezium.mariadb.version)"
		dest="$cache/debezium-mariadb-$version"
		;;
	esac
	if [[ -z "$version" ]]; then
		echo "debezium-jars: no Debezium version for $connector in $pom" >&2
		return 1
	fi
	if complete "$dest"; then
		echo "$dest"
		return 0
	fi
	for tool in java mvn; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			echo "debezium-jars: '$tool' not found (apt-get install openjdk-17-jdk-headless maven)" >&2
			return 1
		fi
	done
	mkdir -p "$cache"
	# One build at a time (parallel test packages may call this together).
	(
		flock 9
		if complete "$dest"; then
			exit 0
		fi
		tmp="$(mktemp -d "$dest.tmp.XXXXXX")"
		trap 'rm -rf "$tmp"' EXIT
		echo "debezium-jars: building the Debezium $version runner ($connector) into $dest" >&2
		# The build directory is outside the source tree.
		mvn -q -B -f "$pom" -P "$connector" -Dbench.build.dir="$tmp/build" \
			package dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$tmp/jars" >&2
		if [[ ! -f "$tmp/build/debezium-bench.jar" ]]; then
			echo "debezium-jars: debezium-bench.jar missing after the build" >&2
			exit 1
		fi
		if ! compgen -G "$tmp/jars/debezium-embedded-$version.jar" >/dev/null; then
			echo "debezium-jars: debezium-embedded-$version.jar missing after the build" >&2
			exit 1
		fi
		cp "$tmp/build/debezium-bench.jar" "$tmp/jars/"
		echo "$sum" >"$tmp/jars/.complete"
		rm -rf "$dest"
		mv "$tmp/jars" "$dest"
	) 9>"$dest.lock"
	echo "$dest"
}

complete() {
	[[ -f "$1/.complete" && -f "$1/debezium-bench.jar" ]] && [[ "$(cat "$1/.complete")" == "$sum" ]]
}

for c in "${connectors[@]}"; do
	build "$c"
done
