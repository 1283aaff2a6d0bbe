package shard

// Terms are what a problem adds to its rows beyond the data: the loss
// and its width, the bias feature, the class weights and the held-out
// fold. One value carries them from the flags (train) through the
// objective (objective.Objective, objective.Constants) to the kernels
// (Point) and onto the wire (wire.Point), each embedding it: a new
// loss parameter is a field here and its uses, not a copy in each.
type Terms struct {
	// Loss is the rows' loss (the zero value: the squared hinge), and
	// Epsilon the regression loss's insensitive width (LIBLINEAR's -p).
	Loss    Loss
	Epsilon float64
	// Bias is the bias feature's value; < 0 means no bias.
	Bias float64
	// Weights, when set, scale each row's loss by its class's weight
	// (LIBLINEAR's -wi): Weights[2k] for the rows positive in problem k,
	// Weights[2k+1] for the others. Nil means every weight is 1.
	Weights []float64
	// Holdout, when positive, is a cross-validation fold: Eval and HessVec
	// leave its rows out, and Tally counts only them. Shards must have
	// their folds set (SetFolds).
	Holdout int
}
