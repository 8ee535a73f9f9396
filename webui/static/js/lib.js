// The console's one entry to its vendored libraries: Preact, its hooks and
// htm (tagged templates instead of a JSX build step).
import { h, render, Fragment, createContext } from '../vendor/preact.module.js';
import htm from '../vendor/htm.module.js';

export const html = htm.bind(h);
export { h, render, Fragment, createContext };
export { useState, useEffect, useRef, useMemo, useCallback, useReducer, useContext } from '../vendor/hooks.module.js';
