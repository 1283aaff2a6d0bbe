// Package logging builds the zap loggers of the commands: a readable
// console format on a terminal, JSON otherwise (containers, files).
package logging

import (
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// New returns a logger writing to stderr at info level (error level when
// quiet, debug level when verbose).
func New(quiet, verbose bool) *zap.Logger {
	level := zapcore.InfoLevel
	switch {
	case quiet:
		level = zapcore.ErrorLevel
	case verbose:
		level = zapcore.DebugLevel
	}
	var enc zapcore.Encoder
	if term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("OSGM_LOG_FORMAT") != "json" || os.Getenv("OSGM_LOG_FORMAT") == "console" {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(cfg)
	} else {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level))
}
