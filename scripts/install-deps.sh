#!/usr/bin/env bash
# Installs the servers and tools that sluice's tests, benchmarks and the
# integration harness (integration/harness) run: PostgreSQL, MariaDB, Redis,
# python3, procps, Java and Maven, from the Debian 12 packages, then the
# Apache Kafka broker jars, the schema registry, the search nodes,
# PostgreSQL 16 and Debezium through Maven (scripts/*.sh).
#
# Idempotent: when every needed command is present it changes nothing and
# does not touch the network. Otherwise it runs apt-get update once and
# installs the packages (as root, or through sudo). Nothing is downloaded
# except by apt-get, pip and Maven.
#
# The harness starts its own throwaway servers on random 127.0.0.1 ports in
# temp dirs, so services the packages may have started are not needed; they
# are left as they are (they listen on the default ports, which the harness
# never uses).
#
# Go must already be installed and on PATH; this script only checks it.
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

# have NAME... succeeds when one of the commands exists on PATH or in the
# sbin/bin dirs (daemons live in /usr/sbin, often not on a user's PATH).
have() {
	local n d
	for n in "$@"; do
		command -v "$n" >/dev/null 2>&1 && return 0
		for d in /usr/sbin /usr/bin /usr/local/sbin /usr/local/bin /sbin /bin; do
			[[ -x "$d/$n" ]] && return 0
		done
	done
	return 1
}

# have_postgres succeeds when a PostgreSQL server and initdb are installed
# where the harness looks for them.
have_postgres() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/postgres" && -x "$d/initdb" ]] && return 0
	done
	return 1
}

missing=()
have_postgres || missing+=(postgresql postgresql-contrib)
have psql || missing+=(postgresql-client)
have mariadbd mysqld || missing+=(mariadb-server)
have mariadb-install-db mysql_install_db || missing+=(mariadb-server)
have mariadb mysql || missing+=(mariadb-client)
have redis-server || missing+=(redis-server)
have python3 || missing+=(python3)
have ps || missing+=(procps)
have pkill || missing+=(procps)
have java || missing+=(openjdk-17-jre-headless)
have mvn || missing+=(maven)

if ((${#missing[@]} == 0)); then
	log "PostgreSQL, MariaDB, Redis, python3 and procps are installed"
else
	# Deduplicate, keeping the order.
	declare -A seen=()
	pkgs=()
	for p in "${missing[@]}"; do
		[[ -n "${seen[$p]:-}" ]] && continue
		seen[$p]=1
		pkgs+=("$p")
	done
	command -v apt-get >/dev/null 2>&1 ||
		die "missing packages (${pkgs[*]}) and no apt-get: this script supports Debian 12; install them by hand"
	sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "missing packages (${pkgs[*]}): run as root or install sudo"
		sudo=(sudo)
	fi
	log "installing: ${pkgs[*]}"
	"${sudo[@]}" apt-get update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		"${pkgs[@]}"
	have_postgres || die "PostgreSQL server still missing under /usr/lib/postgresql/*/bin after apt-get install"
	have mariadbd mysqld || die "MariaDB server still missing after apt-get install"
	have redis-server || die "redis-server still missing after apt-get install"
fi

# Servers refuse to run as root; when tests run as root the harness switches
# to these system users, which the packages create.
if [[ "$(id -u)" == 0 ]]; then
	for u in postgres mysql; do
		id "$u" >/dev/null 2>&1 || die "system user $u is missing (reinstall its server package)"
	done
fi

if ! command -v go >/dev/null 2>&1; then
	for g in /usr/local/go/bin/go /usr/lib/go/bin/go "$HOME/go/bin/go" "$HOME/sdk/go/bin/go"; do
		if [[ -x "$g" ]]; then
			die "go is installed at $g but not on PATH: export PATH=\"$(dirname "$g"):\$PATH\""
		fi
	done
	die "go is not installed (or not on PATH); sluice needs the Go version named in go.mod"
fi
log "$(go version)"

# fastavro: an independent Avro decoder the schema tests check against.
if ! python3 -c 'import fastavro' >/dev/null 2>&1; then
	log "installing fastavro (pip)"
	python3 -m pip install --quiet fastavro ||
		python3 -m pip install --quiet --break-system-packages fastavro
fi

# Apache Kafka's broker jars (through Maven), cached across runs.
log "kafka jars: $("$(dirname "${BASH_SOURCE[0]}")/kafka-jars.sh")"
# A Confluent-compatible schema registry (Apicurio Registry, built through
# Maven), cached across runs.
log "schema registry: $("$(dirname "${BASH_SOURCE[0]}")/registry-build.sh")"
# The OpenSearch and Elasticsearch server distributions (through Maven),
# cached across runs.
log "search nodes: $("$(dirname "${BASH_SOURCE[0]}")/search-dist.sh")"
# PostgreSQL 16 server binaries (through Maven), for the hot-standby
# tests (logical decoding on a standby needs 16), cached across runs.
log "postgres 16: $("$(dirname "${BASH_SOURCE[0]}")/postgres16.sh")"
# The Debezium peer of the benchmarks (embedded engine, through Maven),
# cached across runs.
log "debezium: $("$(dirname "${BASH_SOURCE[0]}")/debezium-jars.sh" all | tr '\n' ' ')"
log "ok"
