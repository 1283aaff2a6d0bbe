package logging

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestFormats(t *testing.T) {
	var js, con bytes.Buffer
	NewTo(&js, "json", zapcore.InfoLevel).Info("training", zap.Int("iter", 7), zap.Float64("f", 1.5))
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatalf("JSON line does not parse: %v: %s", err, js.String())
	}
	if m["msg"] != "training" || m["iter"] != 7.0 || m["level"] != "info" {
		t.Fatalf("JSON fields: %v", m)
	}
	NewTo(&con, "console", zapcore.InfoLevel).Info("training", zap.Int("iter", 7))
	line := con.String()
	if !strings.Contains(line, "\tINFO\ttraining\t") || !strings.Contains(line, `{"iter": 7}`) {
		t.Fatalf("console line: %q", line)
	}
}

func TestLevels(t *testing.T) {
	var b bytes.Buffer
	log := NewTo(&b, "json", zapcore.InfoLevel)
	log.Debug("every iteration")
	log.Info("every few seconds")
	if strings.Contains(b.String(), "every iteration") || !strings.Contains(b.String(), "every few seconds") {
		t.Fatalf("info level: %s", b.String())
	}
	b.Reset()
	NewTo(&b, "json", zapcore.DebugLevel).Debug("every iteration")
	if !strings.Contains(b.String(), "every iteration") {
		t.Fatal("debug level dropped a debug line")
	}
}

func TestEnvLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want zapcore.Level
		bad  bool
	}{
		{"", zapcore.InfoLevel, false},
		{"debug", zapcore.DebugLevel, false},
		{"info", zapcore.InfoLevel, false},
		{"warn", zapcore.WarnLevel, false},
		{"ERROR", zapcore.ErrorLevel, false},
		{"warning", zapcore.WarnLevel, false}, // zap reads it as warn
		{"verbose", zapcore.InfoLevel, true},
		{"fatal", zapcore.InfoLevel, true}, // would hide the errors
		{"3", zapcore.InfoLevel, true},
	} {
		got, err := envLevel(tc.in)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("envLevel(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
			t.Errorf("envLevel(%q): the error does not name the value: %v", tc.in, err)
		}
	}
}

// TestWithEvents: entries marked as events reach the sink, with the
// logger's and the entry's fields as text, at any level and even where
// the log itself writes errors only; other entries do not.
func TestWithEvents(t *testing.T) {
	var got []string
	var buf bytes.Buffer
	log := WithEvents(NewTo(&buf, "json", zapcore.ErrorLevel), func(kind string, at time.Time, text string) {
		if at.IsZero() {
			t.Error("an event without its time")
		}
		got = append(got, kind+": "+text)
	})
	log = log.With(zap.String("job", "j"))
	log.Info("plain")
	log.Warn("worker lost", Event("lost"), zap.String("worker", "w1"), zap.Duration("silent", 2*time.Second))
	log.Debug("checkpoint written", Event("checkpoint"), zap.Int("passes", 7))
	want := []string{"lost: worker lost job=j silent=2s worker=w1", "checkpoint: checkpoint written job=j passes=7"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if buf.Len() != 0 {
		t.Fatalf("the error-level log wrote %q", buf.String())
	}
}
