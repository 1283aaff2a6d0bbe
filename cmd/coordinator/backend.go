package main

import (
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/shard"
)

// openBackend loads the shards where they will be evaluated.
func openBackend(o *options, info shard.Info, ranges []shard.Range, log *zap.Logger) (shard.Backend, func(), error) {
	shards, err := shard.Load(o.train, ranges, o.workers)
	if err != nil {
		return nil, nil, err
	}
	return shard.NewLocal(shards, o.workers), func() {}, nil
}
