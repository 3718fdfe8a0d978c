// Package integration holds sluice's end-to-end tests: the real binary
// against real servers started by integration/harness, including kill -9
// chaos runs that compare every sink row with the source.
package integration
