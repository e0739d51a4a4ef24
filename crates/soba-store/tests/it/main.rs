mod import;
