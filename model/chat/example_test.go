package chat_test

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/model/chat"
)

func Example() {
	cfg, err := chat.FromTokenizerConfig([]byte(`{
		"bos_token": "<s>",
		"eos_token": "</s>",
		"chat_template": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}"
	}`))
	if err != nil {
		panic(err)
	}
	prompt, err := cfg.Render([]chat.Message{
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello!"},
		{Role: "user", Content: "Bye"},
	}, chat.Options{})
	fmt.Printf("%q %v\n", prompt, err)

	_, err = cfg.Render([]chat.Message{{Role: "assistant", Content: "first"}}, chat.Options{})
	var raised *chat.RaiseError
	fmt.Println(errors.As(err, &raised), raised.Message)
	// Output:
	// "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]" <nil>
	// true Conversation roles must alternate user/assistant/user/assistant/...
}

func ExampleParse_unsupported() {
	_, err := chat.Parse("{% macro greet(name) %}Hi {{ name }}{% endmacro %}")
	fmt.Println(errors.Is(err, chat.ErrUnsupported))
	fmt.Println(err)
	// Output:
	// true
	// chat: parse template: line 1: unsupported tag 'macro'
}
