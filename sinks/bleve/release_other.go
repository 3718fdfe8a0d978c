//go:build !linux

package bleve

// dropPages does nothing outside Linux: mapped pages stay resident until
// their segment closes.
func dropPages([]byte) {}
