// Undefined and unused names are errors: the page is ES modules with no build step,
// so a name missing from an import is found here, not in a control room.
import globals from 'globals';

export default [
  { ignores: ['vendor/**', 'node_modules/**'] },
  {
    files: ['**/*.js'],
    languageOptions: { sourceType: 'module', globals: globals.browser },
    rules: { 'no-undef': 'error', 'no-unused-vars': 'error' },
  },
];
