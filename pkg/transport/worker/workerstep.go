package worker

import "github.com/osgm-svm/osgm/pkg/transport/wire"

// workerEvent is one thing a worker's loop hands its core: an
// assignment, a finished load, a point, or a sum another worker relayed.
type workerEvent interface{ workerEvent() }

type (
	gotAssign struct{ a wire.Assign }
	gotLoad   struct{ r loadResult }
	gotPoint  struct{ m roundMsg }
	gotRelay  struct{ m relayMsg }
)

func (gotAssign) workerEvent() {}
func (gotLoad) workerEvent()   {}
func (gotPoint) workerEvent()  {}
func (gotRelay) workerEvent()  {}

// Step is the core's one way in: the worker's protocol has no clock of
// its own (the coordinator's decides when a round goes out again).
func (w *workerCore) Step(ev workerEvent) {
	switch ev := ev.(type) {
	case gotAssign:
		w.assign(ev.a)
	case gotLoad:
		w.finishLoad(ev.r)
	case gotPoint:
		w.onPoint(ev.m)
	case gotRelay:
		w.onRelay(ev.m)
	}
}
