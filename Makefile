# The README's commands. `make test` is what CI runs.
GO ?= go
PKGS := ./...

.PHONY: deps build test vet unit fuzz quickstart bench-postgres bench-sinks bench-kafka bench-mysql bench-transforms bench clean

deps:
	bash scripts/install-deps.sh
	$(GO) mod download

build:
	$(GO) build -o bin/sluice ./cmd/sluice

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)

# vet, then every test (unit, conformance, integration against real
# PostgreSQL, MariaDB and Redis started by integration/harness) under -race.
# The integration package, by far the longest, is listed first so that it
# starts first and the others share the second core beside it. (vet stays
# without -race: its build is the one the integration tests' daemon binary
# reuses.)
test: vet
	GO=$(GO) bash scripts/test.sh -race -count=1 -timeout 45m ./integration/ $(PKGS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./config/

quickstart:
	$(GO) run ./cmd/quickstart

bench-postgres:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./sources/postgres/

# Every upsert sink: 1,000,000 six-column upserts each, with the ratio to
# the target's own bulk path measured in the same run.
bench-sinks:
	SLUICE_BENCH_ROWS=1000000 $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 90m \
		./sinks/postgres/ ./sinks/redis/ ./sinks/duckdb/ ./sinks/bleve/ ./sinks/search/

# Postgres into Kafka: workload (a) against pg_recvlogical, the Kafka ceiling and
# Debezium, then latency at 5k/20k rows/s and recovery after kill -9.
bench-kafka:
	$(GO) run ./cmd/sluice-bench -scenario pg-stream,pg-latency -runs 3

# MariaDB binlog: 1,000,000 inserts and 1,000,000 updates through the decoder
# and end to end into DuckDB, against mariadb-binlog and MariaDB's own write
# rate in the same run.
bench-mysql:
	$(GO) run ./cmd/sluice-bench -scenario mariadb-binlog-bulk -runs 3

# The record transforms: 1,000,000 records from memory through filter +
# compute + mask and through no operator, alternately, into DuckDB and
# into a sink that writes nothing; and each operator alone. Then the
# window, the nest and the join against their references.
bench-transforms:
	$(GO) test -run '^$$' -bench Operator -benchtime 1000x ./transform/chainbench/
	$(GO) test -run '^$$' -bench Pipeline -benchtime 1x -count 3 ./transform/chainbench/ -args -sink duckdb
	$(GO) test -run '^$$' -bench Pipeline -benchtime 1x -count 3 ./transform/chainbench/ -args -sink discard
	$(GO) test -run '^$$' -bench Pipeline -benchtime 1x -count 3 ./transform/chainbench/ -args -sink kafka
	$(GO) test -run '^$$' -bench Window -benchtime 1x -count 3 ./transform/chainbench/ -args -sink duckdb
	$(GO) test -run '^$$' -bench Window -benchtime 1x -count 3 ./transform/chainbench/ -args -sink discard
	$(GO) test -run '^$$' -bench Nest -benchtime 1x -count 2 ./transform/chainbench/ -args -sink opensearch
	$(GO) test -run '^$$' -bench Nest -benchtime 1x -count 2 ./transform/chainbench/ -args -sink duckdb
	$(GO) test -run '^$$' -bench Nest -benchtime 1x -count 2 ./transform/chainbench/ -args -sink discard
	$(GO) test -run '^$$' -bench Aggregate -benchtime 1x -count 2 ./transform/chainbench/ -args -sink duckdb
	$(GO) test -run '^$$' -bench Aggregate -benchtime 1x -count 2 ./transform/chainbench/ -args -sink discard
	$(GO) test -run '^$$' -bench Join -benchtime 1x ./transform/join/

# Every scenario of package bench, 3 runs each, into bench/results/;
# PROFILE=1 also writes CPU and heap profiles and execution traces to
# bench/results/profiles/.
bench:
	$(GO) run ./cmd/sluice-bench -runs 3 -docs docs/performance.md $(if $(PROFILE),-profile bench/results/profiles)

clean:
	rm -rf bin
