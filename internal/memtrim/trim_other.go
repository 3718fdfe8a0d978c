//go:build !linux

package memtrim

// Trim does nothing outside Linux; it returns 0.
func Trim() int64 { return 0 }
