package mysql

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogTo routes go-mysql's slog output into the source's zap logger, one
// level down: the library's "info" (rotations, connects) is sluice's debug.
func slogTo(log *zap.Logger) *slog.Logger { return slog.New(zapHandler{log: log.Named("binlog")}) }

type zapHandler struct {
	log   *zap.Logger
	attrs []zap.Field
}

func (h zapHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.Core().Enabled(zapLevel(l))
}

func (h zapHandler) Handle(_ context.Context, r slog.Record) error {
	fields := append([]zap.Field(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, zap.Any(a.Key, a.Value.Any()))
		return true
	})
	if ce := h.log.Check(zapLevel(r.Level), r.Message); ce != nil {
		ce.Write(fields...)
	}
	return nil
}

func (h zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := h
	n.attrs = append(append([]zap.Field(nil), h.attrs...), make([]zap.Field, 0, len(attrs))...)
	for _, a := range attrs {
		n.attrs = append(n.attrs, zap.Any(a.Key, a.Value.Any()))
	}
	return n
}

func (h zapHandler) WithGroup(name string) slog.Handler {
	return zapHandler{log: h.log.Named(name), attrs: h.attrs}
}

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	}
	return zapcore.DebugLevel
}
