/* model_files.h: the files beside a model's weights (tokenizer, generation config) that every command
 * writing a model directory from another one carries over, so the new directory loads as the old one did. */
#ifndef QLT_MODEL_FILES_H
#define QLT_MODEL_FILES_H

/* Copies each of tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json,
 * tokenizer.model, vocab.json, merges.txt, added_tokens.json and chat_template.jinja present in in_dir to
 * out_dir (atomically, file by file). 0, or -1 with qlt_fail naming the file. */
int qlt_cli_copy_model_files(const char *in_dir, const char *out_dir);

#endif
