package obs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://user:secret@host:5432/db", "postgres://user:xxxxx@host:5432/db"},
		{"dial postgres://app:p@ss:w0rd@db.internal/app?sslmode=require failed",
			"dial postgres://app:xxxxx@db.internal/app?sslmode=require failed"},
		{`dsn "mysql://root:hunter22@10.0.0.1:3306/shop"`, `dsn "mysql://root:xxxxx@10.0.0.1:3306/shop"`},
		{"postgres://user@host/db", "postgres://user@host/db"},
		{"https://example.com/a@b", "https://example.com/a@b"},
		{"host=db user=app password=s3cr3t dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='with space' port=5432", "host=db password=xxxxx port=5432"},
		{"postgres://h/db?sslmode=disable&password=abc123&x=1", "postgres://h/db?sslmode=disable&password=xxxxx&x=1"},
		{"PASSWORD = topsecret", "PASSWORD = xxxxx"},
		{"db_password=abcd sslpassword=efgh", "db_password=xxxxx sslpassword=xxxxx"},
		{`{"user":"a","password":"pw\"x"}`, `{"user":"a","password":"xxxxx"}`},
		{"root:pa@ss@tcp(127.0.0.1:3306)/shop", "root:xxxxx@tcp(127.0.0.1:3306)/shop"},
		{"nothing to hide here", "nothing to hide here"},
	}
	for _, c := range cases {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if got := Redact(Redact(c.in)); got != c.want {
			t.Errorf("Redact not idempotent on %q: %q", c.in, got)
		}
	}
}

func TestRegisterSecret(t *testing.T) {
	RegisterSecret("tok-Δ/9&z")
	RegisterSecret("ab") // too short: ignored
	got := Redact(`token tok-Δ/9&z escaped tok-%CE%94%2F9%26z json "tok-Δ/9\u0026z" ab`)
	if strings.Contains(got, "tok-") || !strings.Contains(got, " ab") {
		t.Fatalf("got %q", got)
	}
	// JSON-escaped form as encoding/json writes it.
	if got := Redact(`"tok-Δ/9\u0026z"`); got != `"xxxxx"` {
		t.Fatalf("json form: %q", got)
	}
}

type leakyStringer struct{}

func (leakyStringer) String() string { return "conn postgres://u:stringer-secret@h/db" }

type cfg struct {
	DSN  string
	Port int
}

func TestLoggerNeverLeaksDSNPassword(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger("debug", format, &buf)
			if err != nil {
				t.Fatal(err)
			}
			RegisterSecret("registered-secret-42")
			dsn := "postgres://replicator:Sup3rSecret@db:5432/app"
			err = fmt.Errorf("connect %s: %w", dsn, errors.New("password=Sup3rSecret rejected"))
			log = log.With(zap.String("ctx_dsn", dsn), zap.Strings("hosts", []string{dsn}))
			log.Info("opening "+dsn, zap.String("dsn", dsn), zap.Error(err), zap.ByteString("raw", []byte(dsn)),
				zap.Stringer("conn", leakyStringer{}), zap.Any("cfg", cfg{DSN: dsn, Port: 5432}),
				zap.Any("map", map[string]string{"dsn": dsn}), zap.Errors("errs", []error{err}),
				zap.String("other", "token registered-secret-42"))
			log.Sugar().Warnw("sugared "+dsn, "dsn", dsn, "err", err)
			log.Error("with stack", zap.Error(err))
			out := buf.String()
			for _, secret := range []string{"Sup3rSecret", "stringer-secret", "registered-secret-42"} {
				if strings.Contains(out, secret) {
					t.Fatalf("%q leaked:\n%s", secret, out)
				}
			}
			for _, want := range []string{"replicator:xxxxx@db:5432", `5432`, "opening", "sugared", "with stack"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestNewLoggerArgs(t *testing.T) {
	if _, err := NewLogger("loud", "json", nil); err == nil {
		t.Error("bad level accepted")
	}
	if _, err := NewLogger("info", "xml", nil); err == nil {
		t.Error("bad format accepted")
	}
	var buf bytes.Buffer
	log, err := NewLogger("warning", "", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Fatalf("output %q", out)
	}
}
