package objective

import (
	"fmt"

	"github.com/osgm-svm/osgm/pkg/input"
	"github.com/osgm-svm/osgm/pkg/libsvm"
	"github.com/osgm-svm/osgm/pkg/shard"
)

// ForModel loads a data set in this process and binds it to a model's
// classes, features and bias, with the model's loss, lambda = 1/(C m)
// and, for a regression, the loss's epsilon: the objective that model
// was trained for (svmeval's, and the tests' against LIBLINEAR's).
func ForModel(path string, m *libsvm.Model, loss shard.Loss, c, epsilon float64, parallel int) (*Objective, error) {
	info, err := input.Stat(path)
	if err != nil {
		return nil, err
	}
	shards, err := shard.Load(path, input.Layout(info.Size, 0), shard.Options{Parallel: parallel})
	if err != nil {
		return nil, err
	}
	b := NewLocal(shards, parallel)
	sum := shard.Summarize(b.Meta(), loss)
	order := make([]float64, len(m.Labels))
	for i, l := range m.Labels {
		order[i] = float64(l)
	}
	if err := b.SetClasses(order); err != nil {
		return nil, err
	}
	if int(sum.MaxIndex) > m.NFeature {
		return nil, fmt.Errorf("%s has %d features, the model %d", path, sum.MaxIndex, m.NFeature)
	}
	bias := m.Bias
	if bias < 0 {
		bias = -1
	}
	obj := New(b, m.NFeature, 1/(c*float64(sum.Rows)), bias)
	obj.Loss, obj.Epsilon = loss, epsilon
	return obj, nil
}
