package logging

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EventKey is the field that makes a log entry an event: a change a user
// watching the run wants to see (a worker joined or lost, shards moved, a
// round sent again, a reconnection, a checkpoint written).
const EventKey = "event"

// Event marks a log entry as an event of this kind.
func Event(kind string) zap.Field { return zap.String(EventKey, kind) }

// Sink hears each event logged: its kind, when, and the entry's message
// with its other fields as text.
type Sink func(kind string, at time.Time, text string)

// WithEvents returns log that also hands its events, at every level
// whatever level log writes at, to sink: a routine event (a checkpoint
// after the first) is logged at debug level and still shown.
func WithEvents(log *zap.Logger, sink Sink) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, &eventCore{sink: sink})
	}))
}

// eventCore is the zapcore.Core that picks the events out.
type eventCore struct {
	sink   Sink
	fields []zapcore.Field // from With
}

func (c *eventCore) Enabled(zapcore.Level) bool { return true }

func (c *eventCore) With(fs []zapcore.Field) zapcore.Core {
	return &eventCore{sink: c.sink, fields: append(slices.Clip(c.fields), fs...)}
}

func (c *eventCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}

// Write hands an event to the sink; every other entry (most of them,
// debug lines included: the core is enabled at every level) costs only
// the look for its event field.
func (c *eventCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	all := append(slices.Clip(c.fields), fs...)
	at := slices.IndexFunc(all, func(f zapcore.Field) bool { return f.Key == EventKey })
	if at < 0 {
		return nil
	}
	kind := all[at].String
	enc := zapcore.NewMapObjectEncoder()
	for i, f := range all {
		if i != at {
			f.AddTo(enc)
		}
	}
	var b strings.Builder
	b.WriteString(e.Message)
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		fmt.Fprintf(&b, " %s=%v", k, enc.Fields[k])
	}
	c.sink(kind, e.Time, b.String())
	return nil
}

func (c *eventCore) Sync() error { return nil }
