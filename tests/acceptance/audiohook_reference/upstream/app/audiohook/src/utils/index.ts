export * from './error';
export * from './logger';
export * from './promise';
export { default as StreamDuration } from './streamduration';
export * from './timeprovider';
