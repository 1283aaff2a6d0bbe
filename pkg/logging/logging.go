// Package logging builds the zap loggers of the commands: a readable
// console format on a terminal, JSON otherwise (containers, files).
package logging

import (
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// New returns a logger writing to stderr: info level (error level when
// quiet; debug level with verbose or OSGM_LOG_LEVEL=debug), in the format
// OSGM_LOG_FORMAT names ("console" or "json"), else console on a terminal
// and JSON otherwise. Nothing is sampled away.
func New(quiet, verbose bool) *zap.Logger {
	level := zapcore.InfoLevel
	switch {
	case quiet:
		level = zapcore.ErrorLevel
	case verbose || os.Getenv("OSGM_LOG_LEVEL") == "debug":
		level = zapcore.DebugLevel
	}
	format := os.Getenv("OSGM_LOG_FORMAT")
	if format == "" {
		format = "json"
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = "console"
		}
	}
	return NewTo(os.Stderr, format, level)
}

// NewTo returns a logger writing format ("console" or "json") to w.
func NewTo(w io.Writer, format string, level zapcore.Level) *zap.Logger {
	var enc zapcore.Encoder
	if format == "console" {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(cfg)
	} else {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level))
}
