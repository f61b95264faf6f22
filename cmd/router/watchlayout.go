package main

// The layout of the watch screen, apart from what it shows (watchview.go): sections fitted
// into the screen's height, and tables whose columns fit its width.

import (
	"cmp"
	"slices"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/charmbracelet/x/ansi"
)

// section is one block of the body: head lines always shown with it, rows as many as fit.
// more is the text of the last row when some do not fit, given how many are left out.
type section struct {
	head  []string
	rows  []string
	extra int // rows left out before drawing (more than the screen holds), counted in more
	min   int // rows it gets before any section gets more
	more  func(n int) string
}

// fitSections gives each section its head and rows within avail lines (<0: no limit): first
// every section its minimum (dropping sections from the last when even that does not fit),
// then the rest in order. A section short of rows ends with its "more" line.
func fitSections(secs []section, avail int) [][]string {
	if avail < 0 {
		out := make([][]string, len(secs))
		for i, s := range secs {
			out[i] = append(slices.Clone(s.head), s.rows...)
		}
		return out
	}
	need := func(s section) int { return len(s.head) + min(s.min, len(s.rows)) }
	for len(secs) > 0 {
		total := 0
		for _, s := range secs {
			total += need(s)
		}
		if total <= avail || len(secs) == 1 {
			break
		}
		secs = secs[:len(secs)-1]
	}
	give := make([]int, len(secs))
	left := avail
	for i, s := range secs {
		give[i] = min(s.min, len(s.rows))
		left -= len(s.head) + give[i]
	}
	for i, s := range secs {
		if left <= 0 {
			break
		}
		extra := min(len(s.rows)-give[i], left)
		give[i] += extra
		left -= extra
	}
	out := make([][]string, len(secs))
	for i, s := range secs {
		lines := slices.Clone(s.head)
		n := give[i]
		if n < len(s.rows)+s.extra && n > 0 && s.more != nil {
			lines = append(lines, s.rows[:n-1]...)
			lines = append(lines, s.more(len(s.rows)+s.extra-(n-1)))
		} else {
			lines = append(lines, s.rows[:max(n, 0)]...)
		}
		out[i] = lines
	}
	return out
}

// drawable is the start of rows that a screen can show: at most its height (all when the
// height is unknown). The rest are only counted: drawing costs about 0.1 ms a row, and a
// config may have thousands of rules, a busy host thousands of flows.
func drawable[T any](m watchModel, rows []T) []T {
	if m.height > 0 && len(rows) > m.height {
		return rows[:m.height]
	}
	return rows
}

// column is one column of a table on screen.
type column struct {
	title string
	flex  bool // cut (ending in "…") when the table is wider than the screen
	min   int  // the narrowest a flex column is cut to (defaultMin when 0; never below its title)
	right bool // aligned right (numbers)
	drop  int  // when even cut columns do not fit, those of the highest drop go first; 0 stays
	spare bool // dropped as soon as anything would be cut
}

// colGap is the space between two columns.
const colGap = 2

// defaultMin is the narrowest a flex column without its own min is cut to.
const defaultMin = 8

// tableWidth is the width of a table whose columns have widths (0: dropped).
func tableWidth(widths []int) int {
	sum, n := 0, 0
	for _, w := range widths {
		if w > 0 {
			sum += w
			n++
		}
	}
	return sum + colGap*max(n-1, 0)
}

// table lays rows out under cols and returns the header line and one line per row. It fits
// the width by dropping the spare columns, then the droppable ones as long as even cut
// columns would not fit, then cutting the flexible ones, widest first, so numbers stay whole. lipgloss/table draws it; it does not choose the widths itself
// because it shrinks every column alike, which cuts byte counts in half. style colours a
// cell (nil: plain).
func (m watchModel) table(cols []column, rows [][]string, style func(row, col int) lipgloss.Style) []string {
	widths := fitColumns(cols, rows, m.width)
	var keep []int
	for c, w := range widths {
		if w > 0 {
			keep = append(keep, c)
		}
	}
	headers := make([]string, len(keep))
	for i, c := range keep {
		headers[i] = ansi.Truncate(cols[c].title, widths[c], "…")
	}
	cells := make([][]string, len(rows))
	for r, row := range rows {
		cells[r] = make([]string, len(keep))
		for i, c := range keep {
			cells[r][i] = ansi.Truncate(row[c], widths[c], "…")
		}
	}
	t := table.New().BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderHeader(false).BorderColumn(false).Wrap(false).Headers(headers...).Rows(cells...).
		StyleFunc(func(row, i int) lipgloss.Style {
			s := m.styles.plain
			if row == table.HeaderRow {
				s = m.styles.head
			} else if style != nil {
				s = style(row, keep[i])
			}
			if cols[keep[i]].right {
				s = s.Align(lipgloss.Right)
			}
			if i < len(keep)-1 {
				s = s.PaddingRight(colGap)
			}
			return s
		})
	lines := strings.Split(t.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// fitColumns returns each column's width (0: dropped) so that the table fits width (0: no
// limit), as table describes.
func fitColumns(cols []column, rows [][]string, width int) []int {
	widths := make([]int, len(cols))
	for c, col := range cols {
		widths[c] = ansi.StringWidth(col.title)
		for _, row := range rows {
			widths[c] = max(widths[c], ansi.StringWidth(row[c]))
		}
	}
	if width <= 0 {
		return widths
	}
	floor := func(c int) int {
		if cols[c].flex {
			return min(widths[c], max(cmp.Or(cols[c].min, defaultMin), ansi.StringWidth(cols[c].title)))
		}
		return widths[c]
	}
	floors := func() []int {
		f := make([]int, len(cols))
		for c := range cols {
			if widths[c] > 0 {
				f[c] = floor(c)
			}
		}
		return f
	}
	if tableWidth(widths) > width {
		for c, col := range cols {
			if col.spare {
				widths[c] = 0
			}
		}
	}
	for tableWidth(floors()) > width {
		drop := 0
		for c, col := range cols {
			if widths[c] > 0 {
				drop = max(drop, col.drop)
			}
		}
		if drop == 0 {
			break
		}
		for c, col := range cols {
			if col.drop == drop {
				widths[c] = 0
			}
		}
	}
	for excess := tableWidth(widths) - width; excess > 0; excess-- {
		widest := -1
		for c := range cols {
			if widths[c] > floor(c) && (widest < 0 || widths[c] > widths[widest]) {
				widest = c
			}
		}
		if widest < 0 {
			break
		}
		widths[widest]--
	}
	return widths
}
