package reduce

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRelayGivesTheTreesBits: workers that own shards at random add the
// tree among themselves, their messages delivered in any order, and the
// root they send has the bits the coordinator's own reduction of every
// shard partial gives, for one and for three problems, with a Hessian,
// and with +0 and -0 among the partials' entries.
func TestRelayGivesTheTreesBits(t *testing.T) {
	for _, c := range []struct {
		name          string
		n, K, workers int
		blocks        bool // contiguous blocks of shards, as the coordinator gives out
		hess          int
	}{
		{"one worker", 20, 1, 1, true, 0},
		{"blocks", 64, 1, 5, true, 0},
		{"32 workers over 64 shards", 64, 1, 32, true, 0},
		{"scattered owners", 37, 3, 4, false, 6},
		{"one group", 5, 2, 3, false, 0},
	} {
		for seed := range uint64(5) {
			rng := rand.New(rand.NewPCG(seed, 77))
			const width = 50
			cols, parts := randomPartials(rng, c.n, width, c.K)
			for _, p := range parts {
				signedZeros(rng, p.Grad)
				p.Hess = make([]float64, c.hess)
				for i := range p.Hess {
					p.Hess[i] = rng.NormFloat64()
				}
			}
			want := relaySum(c.K, width, c.hess)
			r := NewReducer(listsOf(cols))
			r.Reset(want)
			for _, p := range parts {
				r.Add(p)
			}
			owners := make([]int, c.n)
			for s := range owners {
				if c.blocks {
					owners[s] = s * c.workers / c.n
				} else {
					owners[s] = rng.IntN(c.workers)
				}
			}
			got := relaySum(c.K, width, c.hess)
			r = NewReducer(listsOf(cols))
			r.Reset(got)
			hops := relayRound(t, rng, cols, parts, owners, c.workers, width, r)
			if !r.Done() {
				t.Fatalf("%s, seed %d: the root never came", c.name, seed)
			}
			sameSum(t, c.name, got, want)
			if c.workers == 1 && hops != 0 {
				t.Fatalf("%s: %d messages between workers", c.name, hops)
			}
		}
	}
}

// signedZeros sets some of v's entries to +0 and some to -0.
func signedZeros(rng *rand.Rand, v []float64) {
	for i := range v {
		switch rng.IntN(6) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = math.Copysign(0, -1)
		}
	}
}

func relaySum(K, width, hess int) *Total {
	s := &Total{Loss: make([]float64, K), BiasGrad: make([]float64, K), Hess: make([]float64, hess)}
	for range K {
		s.Grad = append(s.Grad, make([]float64, width))
	}
	return s
}

func sameSum(t *testing.T, name string, got, want *Total) {
	t.Helper()
	for _, v := range [][2][]float64{{got.Loss, want.Loss}, {got.BiasGrad, want.BiasGrad}, {got.Hess, want.Hess}} {
		for i := range v[1] {
			if math.Float64bits(v[0][i]) != math.Float64bits(v[1][i]) {
				t.Fatalf("%s: %v, want %v", name, v[0], v[1])
			}
		}
	}
	for k := range want.Grad {
		for j := range want.Grad[k] {
			if math.Float64bits(got.Grad[k][j]) != math.Float64bits(want.Grad[k][j]) {
				t.Fatalf("%s: grad[%d][%d] is %v through the workers' tree, %v added at once", name, k, j, got.Grad[k][j], want.Grad[k][j])
			}
		}
	}
}

type relayMsg struct {
	to   int
	node NodeID
	p    *Partial
}

// relayRound runs one round of the workers' tree: each worker sums the
// groups and nodes it holds whole as it would for the coordinator, lays
// them and its other partials out dense and relays them; messages between
// workers go in random order. It returns how many there were.
func relayRound(t *testing.T, rng *rand.Rand, cols [][]uint32, parts []*Partial, owners []int, workers, width int, red *Reducer) int {
	t.Helper()
	n := len(cols)
	K, hess := len(parts[0].Loss), len(parts[0].Hess)
	adder := func(id NodeID) int { first, _ := id.Shards(n); return owners[first] }
	var queue []relayMsg
	relays := make([]*Relay, workers)
	for w := range relays {
		relays[w] = NewRelay(n, width, func(id NodeID) bool { return adder(id) == w }, func(id NodeID, p *Partial) error {
			if id == Root(n) {
				p.Dense = true
				_, err := red.AddNode(id, p)
				return err
			}
			queue = append(queue, relayMsg{adder(id.Parent()), id, p})
			return nil
		})
	}
	for w := range workers {
		held := map[int]*Group{}
		for g, gr := range Groups(cols) {
			first, end := GroupShards(g, n)
			whole := true
			for s := first; s < end; s++ {
				whole = whole && owners[s] == w
			}
			if whole {
				held[g] = gr
			}
		}
		nodes := BuildNodes(n, held)
		comb := NewCombiner(n, nodes, func(id NodeID, p *Partial) error {
			return relays[w].AddNode(id, Scatter(p, nodes[id].Cols, width, nil))
		})
		sums := NewAdder(n, func(g int) *Group { return held[g] }, comb, nil)
		for s, p := range parts {
			if owners[s] != w {
				continue
			}
			if ok, _, err := sums.Add(p, K, hess); ok || err != nil {
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			d := Scatter(p, cols[s], width, nil)
			if ok, err := relays[w].AddShard(d, K, hess); err != nil {
				t.Fatal(err)
			} else if !ok {
				queue = append(queue, relayMsg{adder(NodeID{0, GroupOf(s)}), NodeID{-1, s}, d})
			}
		}
	}
	sent := 0
	for len(queue) > 0 {
		i := rng.IntN(len(queue))
		m := queue[i]
		queue = append(queue[:i], queue[i+1:]...)
		sent++
		var err error
		if m.node.Level < 0 {
			var ok bool
			if ok, err = relays[m.to].AddShard(m.p, K, hess); err == nil && !ok {
				t.Fatalf("shard %d sent to worker %d, which does not add its group", m.node.Index, m.to)
			}
		} else {
			err = relays[m.to].AddNode(m.node, m.p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return sent
}
