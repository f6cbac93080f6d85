package chat

import (
	"testing"
	"time"
)

// Expected values are Python 3.11 datetime.strftime on glibc (C locale).
func TestStrftime(t *testing.T) {
	tm := time.Date(2024, 7, 5, 9, 3, 7, 123456000, time.UTC)
	newYear := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		t      time.Time
		format string
		want   string
	}{
		{tm, "%d %b %Y", "05 Jul 2024"},
		{tm, "%A %B %-d %e|%H:%M:%S %p %I %l %k", "Friday July 5  5|09:03:07 AM 09  9  9"},
		{tm, "%j %y %C %u %w %U %W %V %G %g", "187 24 20 5 5 26 27 27 2024 24"},
		{tm, "%a %h %D %F %T %R %r", "Fri Jul 07/05/24 2024-07-05 09:03:07 09:03 09:03:07 AM"},
		{tm, "%c|%x|%X", "Fri Jul  5 09:03:07 2024|07/05/24|09:03:07"},
		{tm, "%z|%Z|%f|%%|%Q|%", "||123456|%|%Q|%"},
		{tm, "%^a %_m %-m %0e", "FRI  7 7 05"},
		{newYear, "%U %W %V %G %j %I %p", "00 00 53 2020 001 12 AM"},
	}
	for _, c := range cases {
		got, err := strftime(c.t, c.format)
		if err != nil || got != c.want {
			t.Errorf("strftime(%q) = %q, %v; want %q", c.format, got, err, c.want)
		}
	}
}

func TestStrftimeNowUsesClock(t *testing.T) {
	tmpl, err := Parse(`{{ strftime_now("%d %b %Y") }}`)
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return time.Date(2025, 3, 9, 23, 59, 0, 0, time.Local) }
	got, err := tmpl.Render(nil, Options{Now: clock})
	if err != nil || got != "09 Mar 2025" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := tmpl.Render(nil, Options{}); err != nil {
		t.Fatalf("default clock: %v", err)
	}
}
