package harness

import (
	"errors"
	"testing"
)

func TestPortClashRecognisesBindErrors(t *testing.T) {
	for msg, want := range map[string]bool{
		"kafka not ready: java.net.BindException: Address already in use":                           true,
		"schema registry exited during start-up: EOF\n... Port 43975 seems to be in use by another": true,
		"schema registry exited during start-up: out of memory":                                     false,
	} {
		if got := portClash(errors.New(msg)); got != want {
			t.Errorf("portClash(%q) = %v, want %v", msg, got, want)
		}
	}
}
