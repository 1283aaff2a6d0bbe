module github.com/osgm-svm/osgm

go 1.26.8

require (
	github.com/klauspost/compress v1.20.3
	go.uber.org/zap v1.28.0
	gonum.org/v1/gonum v0.17.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/tools v0.42.0 // indirect
)
