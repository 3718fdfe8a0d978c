package obs

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger returns a logger writing to w (stderr when nil) at level
// ("debug", "info" — the default —, "warn", "error") in format "json" (the
// default) or "console". Every entry passes through a redacting core that
// applies Redact to the message, the stack trace and every string-bearing
// field — strings, byte strings, errors (zap.Error), Stringers, reflected
// values (zap.Any) and marshalers (zap.Strings, zap.Object, …) — including
// fields attached with With, so secrets never reach w.
func NewLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl := zapcore.InfoLevel
	switch strings.ToLower(level) {
	case "":
	case "warning":
		lvl = zapcore.WarnLevel
	default:
		l, err := zapcore.ParseLevel(strings.ToLower(level))
		if err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
		}
		lvl = l
	}
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch strings.ToLower(format) {
	case "", "json":
		enc = zapcore.NewJSONEncoder(cfg)
	case "console", "text":
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	if w == nil {
		w = os.Stderr
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(NewRedactingCore(core), zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel)), nil
}

// NewRedactingCore wraps core so that every entry and field is passed
// through Redact before core sees it (see NewLogger).
func NewRedactingCore(core zapcore.Core) zapcore.Core { return redactCore{core} }

type redactCore struct{ zapcore.Core }

func (c redactCore) With(fields []zapcore.Field) zapcore.Core {
	return redactCore{c.Core.With(redactFields(fields))}
}

func (c redactCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c redactCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	e.Message = Redact(e.Message)
	e.Stack = Redact(e.Stack)
	return c.Core.Write(e, redactFields(fields))
}

func redactFields(fields []zapcore.Field) []zapcore.Field {
	out := make([]zapcore.Field, 0, len(fields))
	for _, f := range fields {
		out = append(out, redactField(f)...)
	}
	return out
}

func redactField(f zapcore.Field) []zapcore.Field {
	switch f.Type {
	case zapcore.StringType:
		f.String = Redact(f.String)
	case zapcore.ByteStringType:
		if b, ok := f.Interface.([]byte); ok {
			f.Interface = []byte(Redact(string(b)))
		}
	case zapcore.ErrorType:
		err, ok := f.Interface.(error)
		if !ok {
			return nil
		}
		msg := safe(err.Error)
		out := []zapcore.Field{zap.String(f.Key, Redact(msg))}
		if fm, ok := err.(fmt.Formatter); ok {
			if v := safe(func() string { return fmt.Sprintf("%+v", fm) }); v != msg {
				out = append(out, zap.String(f.Key+"Verbose", Redact(v)))
			}
		}
		return out
	case zapcore.StringerType:
		if s, ok := f.Interface.(fmt.Stringer); ok {
			return []zapcore.Field{zap.String(f.Key, Redact(safe(s.String)))}
		}
	case zapcore.ReflectType:
		return []zapcore.Field{zap.Any(f.Key, redactValue(f.Interface))}
	case zapcore.ObjectMarshalerType, zapcore.ArrayMarshalerType, zapcore.InlineMarshalerType:
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		keys := make([]string, 0, len(enc.Fields))
		for k := range enc.Fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]zapcore.Field, 0, len(keys))
		for _, k := range keys {
			out = append(out, zap.Any(k, redactValue(enc.Fields[k])))
		}
		return out
	}
	return []zapcore.Field{f}
}

// redactValue returns v with every string in it redacted: maps and slices
// built by zapcore.MapObjectEncoder are walked; anything else is replaced by
// its redacted JSON (or, failing that, its redacted %v text).
func redactValue(v any) any {
	switch x := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return x
	case string:
		return Redact(x)
	case []byte:
		return Redact(string(x))
	case error:
		return Redact(safe(x.Error))
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[Redact(k)] = redactValue(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = redactValue(e)
		}
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Redact(safe(func() string { return fmt.Sprintf("%v", v) }))
	}
	r := Redact(string(b))
	if !json.Valid([]byte(r)) {
		return r
	}
	return json.RawMessage(r)
}

// safe calls f, turning a panic (a nil receiver, say) into text.
func safe(f func() string) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("<PANIC=%v>", r)
		}
	}()
	return f()
}
