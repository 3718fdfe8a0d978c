// Package schema will map table shapes (pipeline.Table) to Avro key and value
// schemas, register them with a schema registry and evolve them on DDL.
package schema
