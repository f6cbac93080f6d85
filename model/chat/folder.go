package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNoTemplate: a model folder has no chat template (neither
// chat_template.jinja nor a chat_template in tokenizer_config.json).
var ErrNoTemplate = errors.New("chat: the model has no chat template")

// LoadFolder reads the chat template of a Hugging Face model folder as
// transformers does: chat_template.jinja when the folder has one (what
// save_pretrained writes since transformers 4.43), else the chat_template
// of tokenizer_config.json; bos_token and eos_token come from
// tokenizer_config.json either way.
func LoadFolder(dir string) (*Config, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	jinja, jerr := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if jerr != nil && !errors.Is(jerr, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", jerr)
	}
	if jerr != nil {
		if data == nil {
			return nil, fmt.Errorf("%w (%s has no tokenizer_config.json or chat_template.jinja)", ErrNoTemplate, dir)
		}
		c, err := FromTokenizerConfig(data)
		if err != nil {
			var probe struct {
				ChatTemplate json.RawMessage `json:"chat_template"`
			}
			if json.Unmarshal(data, &probe) == nil && (len(probe.ChatTemplate) == 0 || string(probe.ChatTemplate) == "null") {
				return nil, fmt.Errorf("%w (%s: no chat_template, and no chat_template.jinja beside it)", ErrNoTemplate, cfgPath)
			}
			return nil, fmt.Errorf("%w (in %s)", err, cfgPath)
		}
		return c, nil
	}
	c := &Config{Source: string(jinja)}
	if data != nil {
		var raw struct {
			BOS json.RawMessage `json:"bos_token"`
			EOS json.RawMessage `json:"eos_token"`
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
		if c.BOS, err = specialToken(raw.BOS); err != nil {
			return nil, fmt.Errorf("chat: %s: bos_token: %w", cfgPath, err)
		}
		if c.EOS, err = specialToken(raw.EOS); err != nil {
			return nil, fmt.Errorf("chat: %s: eos_token: %w", cfgPath, err)
		}
	}
	if c.Template, err = Parse(c.Source); err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, filepath.Join(dir, "chat_template.jinja"))
	}
	return c, nil
}
