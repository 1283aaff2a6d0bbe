// Package logging builds the zap loggers of the commands: a readable
// console format on a terminal, JSON otherwise (containers, files).
package logging

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// New returns a logger writing to stderr at the level OSGM_LOG_LEVEL
// names (debug, info, warn or error; info when unset), error when quiet,
// in the format OSGM_LOG_FORMAT names ("console" or "json"), else
// console on a terminal and JSON otherwise. Nothing is sampled away. A
// level it cannot read leaves it at info, with a warning.
func New(quiet bool) *zap.Logger {
	level, err := envLevel(os.Getenv("OSGM_LOG_LEVEL"))
	if quiet {
		level = zapcore.ErrorLevel
	}
	format := os.Getenv("OSGM_LOG_FORMAT")
	if format == "" {
		format = "json"
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = "console"
		}
	}
	log := NewTo(os.Stderr, format, level)
	if err != nil {
		log.Warn("OSGM_LOG_LEVEL ignored", zap.Error(err))
	}
	return log
}

// envLevel reads a level name: info for "", an error naming the value
// for anything but debug, info, warn and error.
func envLevel(s string) (zapcore.Level, error) {
	switch l, err := zapcore.ParseLevel(s); {
	case s == "":
		return zapcore.InfoLevel, nil
	case err != nil || l > zapcore.ErrorLevel:
		return zapcore.InfoLevel, fmt.Errorf("%q is not one of debug, info, warn and error; logging at info", s)
	default:
		return l, nil
	}
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
