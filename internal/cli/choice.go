package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Words names the values of an enumerated flag: value i is Words()[i].
// It is implemented by an empty type, so that a Choice carries its words
// in its type and takes no memory for them.
type Words interface{ Words() []string }

// Choice is a flag that takes one of a fixed list of words: the commands'
// auto/true/false switches (-compact, -resume) and modes (-reduce,
// -points, -place). Its zero value is the first word. Where the words
// include "true" and "false" it reads like a bool flag: -compact alone
// is true, and any spelling strconv.ParseBool takes is taken.
type Choice[W Words] int

func (c Choice[W]) words() []string { var w W; return w.Words() }

func (c Choice[W]) String() string {
	if ws := c.words(); int(c) >= 0 && int(c) < len(ws) {
		return ws[c]
	}
	return fmt.Sprintf("Choice(%d)", int(c))
}

// Set takes one of the words.
func (c *Choice[W]) Set(s string) error {
	ws := c.words()
	if c.IsBoolFlag() {
		if b, err := strconv.ParseBool(s); err == nil {
			s = strconv.FormatBool(b)
		}
	}
	i := slices.Index(ws, s)
	if i < 0 {
		return fmt.Errorf("want %s", either(ws))
	}
	*c = Choice[W](i)
	return nil
}

// IsBoolFlag says whether the flag may be given alone, as true.
func (c *Choice[W]) IsBoolFlag() bool { return slices.Contains(c.words(), "true") }

// Choices are the words, for -h.
func (c *Choice[W]) Choices() []string { return c.words() }

// either is "a, b or c".
func either(ws []string) string {
	if len(ws) < 2 {
		return strings.Join(ws, "")
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " or " + ws[len(ws)-1]
}
