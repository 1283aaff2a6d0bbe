// Package transcript reads and writes the small notations of the protocol
// cores' test transcripts (testdata/worker, testdata/cluster), which both
// sides' tests share.
package transcript

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/osgm-svm/osgm/pkg/reduce"
)

// Spans writes sorted ids as runs: 0-7,9.
func Spans(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i]))
		}
		i = j + 1
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParseSpans reads what Spans writes.
func ParseSpans(s string) ([]int, error) {
	var ids []int
	if s == "none" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRun := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRun {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for id := a; id <= b; id++ {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// WriteDropped writes the counts of dropped messages, a reason a line.
func WriteDropped(w io.Writer, dropped map[string]int) {
	for _, why := range slices.Sorted(maps.Keys(dropped)) {
		fmt.Fprintf(w, "%d: %s\n", dropped[why], why)
	}
}

// ParseNode reads a transcript's node, level.index.
func ParseNode(s string) (reduce.NodeID, error) {
	lvl, idx, _ := strings.Cut(s, ".")
	l, err1 := strconv.Atoi(lvl)
	i, err2 := strconv.Atoi(idx)
	return reduce.NodeID{Level: l, Index: i}, errors.Join(err1, err2)
}
