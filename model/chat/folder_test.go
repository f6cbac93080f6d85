package chat

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadFolder(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "hi"}}
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string
		wantErr error
	}{
		{"config only", map[string]string{"tokenizer_config.json": `{"bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"}`}, "<s>hi", nil},
		{"jinja wins over config", map[string]string{
			"tokenizer_config.json": `{"bos_token": {"content": "<B>"}, "chat_template": "old"}`,
			"chat_template.jinja":   "{{ bos_token }}[{{ messages[0].content }}]",
		}, "<B>[hi]", nil},
		{"jinja alone", map[string]string{"chat_template.jinja": "{{ messages[0].role }}"}, "user", nil},
		{"no template", map[string]string{"tokenizer_config.json": `{"bos_token": "<s>"}`}, "", ErrNoTemplate},
		{"empty folder", nil, "", ErrNoTemplate},
		{"refused construct", map[string]string{"chat_template.jinja": "{% macro m() %}{% endmacro %}"}, "", ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFolder(write(t, tc.files))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Render(msgs, Options{})
			if err != nil || got != tc.want {
				t.Fatalf("render = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
