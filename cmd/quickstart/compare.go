package main

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/duckdb/duckdb-go/v2" // the DuckDB driver, for reading the copy
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/sinks/bleve"
)

// Per table: the row count and an order-independent checksum over columns
// that both databases print the same way.
var checks = []struct {
	table, pg, duck string
}{
	{"customers",
		`SELECT count(*), coalesce(sum(id), 0)::text || '/' || coalesce(sum(balance), 0)::text || '/' || count(*) FILTER (WHERE vip)::text || '/' || coalesce(sum(cardinality(tags)), 0)::text FROM customers`,
		`SELECT count(*), coalesce(sum(id), 0)::VARCHAR || '/' || coalesce(sum(balance), 0)::VARCHAR || '/' || count(*) FILTER (WHERE vip)::VARCHAR || '/' || coalesce(sum(len(tags)), 0)::VARCHAR FROM "public_customers" WHERE NOT _sluice_deleted`},
	{"orders",
		`SELECT count(*), coalesce(sum(id), 0)::text || '/' || coalesce(sum(amount), 0)::text || '/' || count(*) FILTER (WHERE status = 'paid')::text || '/' || coalesce(sum(customer_id), 0)::text FROM orders`,
		`SELECT count(*), coalesce(sum(id), 0)::VARCHAR || '/' || coalesce(sum(amount), 0)::VARCHAR || '/' || count(*) FILTER (WHERE status = 'paid')::VARCHAR || '/' || coalesce(sum(customer_id), 0)::VARCHAR FROM "public_orders" WHERE NOT _sluice_deleted`},
	// The join's output: every order with its customer embedded.
	{"order_docs",
		`SELECT count(*), coalesce(sum(o.id), 0)::text || '/' || count(*) FILTER (WHERE c.vip)::text || '/' || count(c.id)::text FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`,
		`SELECT count(*), coalesce(sum(id), 0)::VARCHAR || '/' || count(*) FILTER (WHERE CAST(customer AS VARCHAR) LIKE '%"vip":true%')::VARCHAR || '/' || count(customer)::VARCHAR FROM "public_order_docs" WHERE NOT _sluice_deleted`},
}

func compare(ctx context.Context, dsn, duckPath string) (result, error) {
	res := result{Equal: true, Path: duckPath}
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer pg.Close(ctx)
	duck, err := sql.Open("duckdb", duckPath+"?access_mode=read_only")
	if err != nil {
		return res, err
	}
	defer duck.Close()
	for _, c := range checks {
		var t tableResult
		t.Name = "public." + c.table
		if err := pg.QueryRow(ctx, c.pg).Scan(&t.SourceN, &t.Source); err != nil {
			return res, fmt.Errorf("postgres %s: %w", c.table, err)
		}
		if err := duck.QueryRowContext(ctx, c.duck).Scan(&t.SinkN, &t.Sink); err != nil {
			return res, fmt.Errorf("duckdb %s: %w", c.table, err)
		}
		t.Source = fmt.Sprintf("%d rows %s", t.SourceN, t.Source)
		t.Sink = fmt.Sprintf("%d rows %s", t.SinkN, t.Sink)
		if t.Source != t.Sink {
			res.Equal = false
		}
		res.Tables = append(res.Tables, t)
	}
	return res, nil
}

// Searches the quickstart runs against its embedded index, each with the
// SQL that counts the same rows in PostgreSQL.
var searches = []struct {
	table, query, pg string
}{
	{"public.customers", "*", `SELECT count(*) FROM customers`},
	{"public.orders", "status:shipped", `SELECT count(*) FROM orders WHERE status = 'shipped'`},
	{"public.customers", "vip:true", `SELECT count(*) FROM customers WHERE vip`},
	{"public.order_docs", `customer:"customer 10"`, `SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'customer 10'`},
}

// compareSearch runs the searches on the bleve index and counts the same
// rows in PostgreSQL.
func compareSearch(ctx context.Context, dsn, indexDir string, res *result) error {
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer pg.Close(ctx)
	for _, q := range searches {
		var c searchResult
		c.Query = q.table + " " + q.query
		if err := pg.QueryRow(ctx, q.pg).Scan(&c.SourceN); err != nil {
			return fmt.Errorf("postgres %s: %w", q.pg, err)
		}
		r, err := bleve.Search(ctx, indexDir, bleve.SearchRequest{Query: q.query, Table: q.table, Size: 1})
		if err != nil {
			return fmt.Errorf("search %s: %w", c.Query, err)
		}
		c.IndexN = int64(r.Total)
		if c.IndexN != c.SourceN {
			res.Equal = false
		}
		res.Searches = append(res.Searches, c)
	}
	return nil
}
